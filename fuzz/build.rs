//! Generates the replay tests (`cargo test`): one per file in `fuzz_targets/`, calling the
//! check that file's `fuzz_target!` calls, so a new target is replayed without anyone
//! writing its test (and one whose check does not exist does not compile).

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let targets = Path::new("fuzz_targets");
    println!("cargo:rerun-if-changed={}", targets.display());
    let mut names: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(targets).expect("fuzz_targets/") {
        let path = entry.expect("an entry").path();
        println!("cargo:rerun-if-changed={}", path.display());
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".rs"))
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path).expect("a target's source");
        // `fuzz_target!(|data: &[u8]| switchyard_fuzz::<module>::check(data));`
        let check = text
            .split("switchyard_fuzz::")
            .nth(1)
            .and_then(|rest| rest.split('(').next())
            .unwrap_or_else(|| {
                panic!(
                    "{}: a target calls switchyard_fuzz::<module>::check(data)",
                    path.display()
                )
            });
        names.push((name.to_string(), check.trim().to_string()));
    }
    names.sort();
    let mut out = String::new();
    for (name, check) in &names {
        writeln!(
            out,
            "#[test]\nfn replay_{name}() {{\n    replay({name:?}, crate::{check});\n}}\n"
        )
        .unwrap();
    }
    let list: Vec<String> = names.iter().map(|(n, _)| format!("{n:?}")).collect();
    writeln!(out, "const TARGETS: &[&str] = &[{}];", list.join(", ")).unwrap();
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("replay.rs");
    std::fs::write(dest, out).expect("writing replay.rs");
}

//! `config check`, `config print`, `upstream import`, what `token` takes, and how variables
//! are read, run as a real process.

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;

use common::binary;

/// A folder of this test's own, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let path = std::env::temp_dir().join(format!("switchyard-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = binary();
    command.args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn config_check_says_ok_or_names_the_key_and_where_it_was_set() {
    let dir = Dir::new("config-check");
    let good = dir.write(
        "good.toml",
        "[limits]\nmax_client_message_size = \"64KiB\"\n",
    );
    let out = run(&["config", "check", "--config", path(&good)], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("ok\n"), "{stdout}");
    assert!(
        stdout.contains("clients reach http://127.0.0.1:8888"),
        "{stdout}"
    );
    assert!(stdout.contains("development mode"), "{stdout}");
    assert!(stdout.contains("1 in the file"), "{stdout}");

    let bad = dir.write(
        "bad.toml",
        "# limits\n[limits]\nmax_client_message_size = \"1XB\"\n",
    );
    let out = run(&["config", "check", "--config", path(&bad)], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "limits.max_client_message_size ({}:3): '1XB' is not a size",
            bad.display()
        )),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    let out = run(
        &["config", "check"],
        &[("SWITCHYARD_TIMEOUTS_CLIENT_TIMEOUT", "abc")],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "timeouts.client_timeout (env SWITCHYARD_TIMEOUTS_CLIENT_TIMEOUT): 'abc' is not a duration"
        ),
        "{stderr}"
    );
    // The checks across settings run too, as `serve` runs them.
    let out = run(&["config", "check", "--listen", "0.0.0.0:8888"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("(listen: flag --listen)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn config_print_says_where_each_value_came_from_and_hides_secrets() {
    let dir = Dir::new("config-print");
    let key = "s".repeat(40);
    let file = dir.write(
        "s.toml",
        &format!(
            "access_key = \"{key}\"\n\n[[upstream.templates]]\n\
             url_template = \"https://f.example/runtime/webhooks/signalr?code=fnkey\"\n"
        ),
    );
    let out = run(
        &[
            "config",
            "print",
            "--config",
            path(&file),
            "--listen",
            "127.0.0.1:9100",
            "--set",
            "limits.max_request_body_size=2MB",
        ],
        &[("SWITCHYARD_CLUSTER_REDIS", "redis://u:hunter2@h:6379")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let line = |start: &str| {
        printed
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no {start} in\n{printed}"))
            .to_string()
    };
    assert!(line("listen = ").ends_with("# flag --listen"), "{printed}");
    assert!(line("access_key = \"<hidden: 40 characters>\"")
        .ends_with(&format!("# {}:1", file.display())));
    // Under its earlier name's variable, shown under its name.
    assert!(line("cluster.backplane = \"redis://u:***@h:6379\"")
        .ends_with("# env SWITCHYARD_CLUSTER_REDIS"));
    assert!(line("limits.max_request_body_size = 2097152")
        .ends_with("# flag --set limits.max_request_body_size"));
    assert!(line("mode = \"auto\"").ends_with("# default"));
    assert!(line("url_template = ").contains("code=***"), "{printed}");
    for secret in [key.as_str(), "hunter2", "fnkey"] {
        assert!(!printed.contains(secret), "{secret} in\n{printed}");
    }
}

#[test]
fn kubernetes_service_links_are_ignored_and_typos_get_one_suggestion() {
    let links = [
        ("SWITCHYARD_PORT", "tcp://10.96.0.12:8888"),
        ("SWITCHYARD_PORT_8888_TCP", "tcp://10.96.0.12:8888"),
        ("SWITCHYARD_PORT_8888_TCP_ADDR", "10.96.0.12"),
        ("SWITCHYARD_PORT_8888_TCP_PORT", "8888"),
        ("SWITCHYARD_PORT_8888_TCP_PROTO", "tcp"),
        ("SWITCHYARD_SERVICE_HOST", "10.96.0.12"),
        ("SWITCHYARD_SERVICE_PORT", "8888"),
        ("SWITCHYARD_SERVICE_PORT_HTTP", "8888"),
    ];
    let out = run(&["config", "check"], &links);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["config", "check"], &[("SWITCHYARD_LISTN", "127.0.0.1:1")]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        "switchyard: error: unknown environment variable SWITCHYARD_LISTN; did you mean \
         SWITCHYARD_LISTEN?"
    );
}

#[test]
fn token_and_connection_string_take_only_what_shapes_urls_and_keys() {
    for command in ["token", "connection-string"] {
        let help = text(&run(&[command, "--help"], &[]).stdout);
        for flag in [
            "--config",
            "--listen",
            "--access-key",
            "--public-endpoint",
            "--tls-cert",
            "--tls-key",
        ] {
            assert!(
                help.contains(flag),
                "{command} --help lacks {flag}:\n{help}"
            );
        }
        for flag in [
            "--redis",
            "--node-id",
            "--internal-url",
            "--cors-origin",
            "--mode",
            "--set",
            "--secondary-access-key",
        ] {
            assert!(!help.contains(flag), "{command} --help has {flag}:\n{help}");
        }
        assert!(help.contains("same ones `serve` runs with"), "{help}");
    }
    let help = text(&run(&["token", "--help"], &[]).stdout);
    assert_eq!(help.matches("[default: 1h]").count(), 1, "{help}");
    let help = text(&run(&["upstream", "init", "--help"], &[]).stdout);
    assert_eq!(help.matches("[default: .]").count(), 1, "{help}");
    // The pairing: the URL follows serve's --public-endpoint.
    let out = run(
        &[
            "token",
            "--hub",
            "chat",
            "--public-endpoint",
            "https://signalr.example.com",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("https://signalr.example.com/client/?hub=chat\n"));
}

#[test]
fn upstream_import_converts_the_emulators_settings() {
    let dir = Dir::new("upstream-import");
    let settings = dir.write(
        "settings.json",
        r#"{"UpstreamSettings":{"Templates":[
            {"UrlTemplate":"http://host/api/{hub}/{event}","EventPattern":"*",
             "CategoryPattern":"*","HubPattern":"*"},
            {"urltemplate":"http://host/chat/{event}","hubpattern":"chat",
             "Auth":{"Type":"ManagedIdentity","ManagedIdentity":{"Resource":"api://app"}}}
        ]}}"#,
    );
    let out = run(&["upstream", "import", path(&settings)], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let toml = text(&out.stdout);
    assert_eq!(toml.matches("[[upstream.templates]]").count(), 2, "{toml}");
    assert!(toml.contains("url_template = \"http://host/api/{hub}/{event}\""));
    assert!(toml.contains("hub_pattern = \"chat\""));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("not converted: template 2: Auth type ManagedIdentity"),
        "{stderr}"
    );

    let output = dir.0.join("switchyard.toml");
    let write = |force: bool| {
        let mut args = vec!["upstream", "import", path(&settings), "-o", path(&output)];
        if force {
            args.push("--force");
        }
        run(&args, &[])
    };
    assert!(write(false).status.success());
    let again = write(false);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("already exists; use --force"));
    assert!(write(true).status.success());
    let check = run(&["config", "check", "--config", path(&output)], &[]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    assert!(text(&check.stdout).contains("upstream templates: 2"));

    let broken = dir.write("broken.json", r#"{"UpstreamSettings":{"Templates":[{}]}}"#);
    let out = run(&["upstream", "import", path(&broken)], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("template 1 has no UrlTemplate"));
}

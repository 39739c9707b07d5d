//! URLs and tokens an app server derives from its connection string (spec §1.1, §2.3, §3).
//!
//! Audiences are built from `Endpoint` as `{scheme}://{host}` with no port, as the SDK
//! does (it also ignores `ClientEndpoint`/`ServerEndpoint` there), which is why
//! `switchyard_auth::server_audience` (port kept) is not used.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use switchyard_auth::{claim_types, ConnectionString, TokenBuilder, DEFAULT_TOKEN_LIFETIME};

use super::AppServerError;

/// `{scheme}://{host}` of `Endpoint`.
fn audience_base(cs: &ConnectionString) -> String {
    let url = &cs.endpoint;
    format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default())
}

/// `{scheme}://{host}/server/?hub={hub lower}`.
pub fn server_audience(cs: &ConnectionString, hub: &str) -> String {
    format!("{}/server/?hub={}", audience_base(cs), hub.to_lowercase())
}

/// `{scheme}://{host}/client/?hub={hub lower}`.
pub fn client_audience(cs: &ConnectionString, hub: &str) -> String {
    format!("{}/client/?hub={}", audience_base(cs), hub.to_lowercase())
}

fn access_key(cs: &ConnectionString) -> Result<&str, AppServerError> {
    cs.access_key.as_deref().ok_or(AppServerError::NoAccessKey)
}

pub fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The bearer token of a server connection: audience [`server_audience`], claim
/// `nameid = server_id`, HS256 with the access key's UTF-8 bytes.
pub fn server_token(
    cs: &ConnectionString,
    hub: &str,
    server_id: &str,
) -> Result<String, AppServerError> {
    Ok(TokenBuilder::new(server_audience(cs, hub))
        .claim(claim_types::NAME_ID, server_id)
        .lifetime(DEFAULT_TOKEN_LIFETIME)
        .sign(access_key(cs)?, now_unix()))
}

/// The token handed to a client by negotiate: `asrs.s.uid` and `nameid` when a user is
/// given, then `asrs.s.sn` (the SDK's server-sticky name), lifetime 1 h.
pub fn client_token(
    cs: &ConnectionString,
    hub: &str,
    user: Option<&str>,
    server_id: &str,
) -> Result<String, AppServerError> {
    let mut builder = TokenBuilder::new(client_audience(cs, hub));
    if let Some(user) = user {
        builder = builder
            .claim(claim_types::USER_ID, user)
            .claim(claim_types::NAME_ID, user);
    }
    Ok(builder
        .claim(claim_types::SERVER_NAME, server_id)
        .lifetime(Duration::from_secs(3600))
        .sign(access_key(cs)?, now_unix()))
}

/// `ws(s)://…/server/?hub={hub lower}&cid={cid}` from `ServerEndpoint` (else `Endpoint`
/// with `Port`).
pub fn server_url(cs: &ConnectionString, hub: &str, cid: &str) -> String {
    let base = cs.server_base_url();
    let text = base.as_str();
    let text = if let Some(rest) = text.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = text.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        text.to_owned()
    };
    format!("{text}server/?hub={}&cid={cid}", hub.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cs(text: &str) -> ConnectionString {
        text.parse().unwrap()
    }

    #[test]
    fn audiences_drop_the_port() {
        let c = cs("Endpoint=http://localhost;Port=8888;AccessKey=k;Version=1.0;");
        assert_eq!(
            server_audience(&c, "Bench"),
            "http://localhost/server/?hub=bench"
        );
        assert_eq!(
            client_audience(&c, "Bench"),
            "http://localhost/client/?hub=bench"
        );
        assert_eq!(
            server_url(&c, "Bench", "x"),
            "ws://localhost:8888/server/?hub=bench&cid=x"
        );
    }

    #[test]
    fn server_endpoint_wins_for_the_url() {
        let c = cs("Endpoint=https://a.example;ServerEndpoint=https://b.example:444/p;AccessKey=k;Version=1.0;");
        assert_eq!(
            server_url(&c, "h", "c"),
            "wss://b.example:444/p/server/?hub=h&cid=c"
        );
        assert_eq!(server_audience(&c, "h"), "https://a.example/server/?hub=h");
    }

    #[test]
    fn no_access_key_is_an_error() {
        let c = cs("Endpoint=http://localhost;Version=1.0;");
        assert!(server_token(&c, "h", "s").is_err());
    }
}

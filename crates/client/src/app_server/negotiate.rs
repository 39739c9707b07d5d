//! The app server's negotiate redirect (spec §2.1): the JSON that sends a client on to
//! the service with a token this server signed. HTTP is left to the caller.

use base64::Engine;
use serde_json::{json, Value};
use switchyard_auth::ConnectionString;
use url::form_urlencoded::byte_serialize;

use super::token::client_token;
use super::AppServerError;

/// The 500 body when no server connection of the hub is up (the SDK's wording).
pub const NOT_CONNECTED: &str =
    "Azure SignalR Service is not connected yet, please try again later.";

/// A negotiate answer: `url` and `accessToken` for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub url: String,
    pub access_token: String,
}

impl Redirect {
    /// `{"negotiateVersion":0,"url":…,"accessToken":…,"availableTransports":[]}` in the
    /// order ASP.NET Core writes it.
    pub fn to_json(&self) -> Value {
        json!({
            "negotiateVersion": 0,
            "url": self.url,
            "accessToken": self.access_token,
            "availableTransports": [],
        })
    }
}

/// Builds the redirect for a negotiate request on `/{hub_path}/negotiate`.
///
/// `query` is the negotiate request's raw query (without `?`); `negotiateVersion` is
/// dropped and everything else is passed on, as the SDK does. `user`, when given,
/// becomes the token's `asrs.s.uid` and `nameid`.
pub fn redirect(
    cs: &ConnectionString,
    hub_path: &str,
    query: &str,
    user: Option<&str>,
    server_id: &str,
) -> Result<Redirect, AppServerError> {
    let hub = hub_path.to_lowercase();
    let mut url = format!("{}client/?hub={hub}", cs.client_base_url());
    url.push_str("&asrs.op=");
    url.extend(byte_serialize(format!("/{hub_path}").as_bytes()));
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let key = pair.split('=').next().unwrap_or_default();
        if !key.eq_ignore_ascii_case("negotiateVersion") {
            url.push('&');
            url.push_str(pair);
        }
    }
    url.push_str("&asrs_request_id=");
    url.extend(byte_serialize(request_id().as_bytes()));
    Ok(Redirect {
        url,
        access_token: client_token(cs, &hub, user, server_id)?,
    })
}

/// Base64 of 8 bytes that identify the request (the SDK uses a Stopwatch timestamp;
/// random bytes serve the same purpose here).
fn request_id() -> String {
    base64::engine::general_purpose::STANDARD.encode(rand::random::<u64>().to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_shape() {
        let cs: ConnectionString = "Endpoint=http://localhost;Port=8888;AccessKey=k;Version=1.0;"
            .parse()
            .unwrap();
        let r = redirect(&cs, "Bench", "negotiateVersion=1&user=u1", Some("u1"), "s").unwrap();
        assert!(
            r.url.starts_with(
                "http://localhost:8888/client/?hub=bench&asrs.op=%2FBench&user=u1&asrs_request_id="
            ),
            "{}",
            r.url
        );
        let v = r.to_json();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "negotiateVersion",
                "url",
                "accessToken",
                "availableTransports"
            ]
        );
    }

    #[test]
    fn client_endpoint_is_used() {
        let cs: ConnectionString =
            "Endpoint=http://a;ClientEndpoint=https://c.example/x;AccessKey=k;Version=1.0;"
                .parse()
                .unwrap();
        let r = redirect(&cs, "bench", "", None, "s").unwrap();
        assert!(r.url.starts_with(
            "https://c.example/x/client/?hub=bench&asrs.op=%2Fbench&asrs_request_id="
        ));
    }
}

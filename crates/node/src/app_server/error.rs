//! Why an app-server connection ended, typed by whose fault it was, so a log line and a
//! metric can tell an app server that broke the protocol from one that went quiet, a socket
//! that failed, or the service cutting a connection off.

use std::time::Duration;

use switchyard_core::CloseReason;

/// Who caused a server connection to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The app server: it broke the protocol or stopped talking.
    AppServer,
    /// The network between us: the socket failed.
    Network,
    /// The service let go of it (its outbound queue passed its budget).
    Service,
}

impl Fault {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::AppServer => "app_server",
            Fault::Network => "network",
            Fault::Service => "service",
        }
    }
}

/// How a server connection ended, other than by a clean close.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    /// Bytes that are not the service protocol (framing, a message, a text frame).
    #[error("{0}")]
    Protocol(String),
    /// Nothing was received for the whole server timeout.
    #[error("Nothing was received from the app server for {}.", humantime::format_duration(*.0))]
    Silent(Duration),
    /// The socket failed.
    #[error("{0}")]
    Socket(String),
    /// A write to the app server made no progress for the whole server timeout: it reads
    /// nothing.
    #[error("The app server read nothing the service sent for {}.", humantime::format_duration(*.0))]
    Stalled(Duration),
    /// The connection's outbound queue was closed (e.g. as a slow consumer).
    #[error("{0}")]
    Queue(CloseReason),
    /// The queue passed its budget while a write waited on the full socket.
    #[error("{0}")]
    CutOff(CloseReason),
}

impl LinkError {
    pub(crate) fn fault(&self) -> Fault {
        match self {
            LinkError::Protocol(_) | LinkError::Silent(_) | LinkError::Stalled(_) => {
                Fault::AppServer
            }
            LinkError::Socket(_) => Fault::Network,
            LinkError::Queue(_) | LinkError::CutOff(_) => Fault::Service,
        }
    }

    /// A stable label for metrics.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            LinkError::Protocol(_) => "protocol_error",
            LinkError::Silent(_) => "server_timeout",
            LinkError::Socket(_) => "socket_error",
            LinkError::Stalled(_) => "write_stalled",
            LinkError::Queue(reason) | LinkError::CutOff(reason) => reason.code(),
        }
    }

    /// Whether the socket can still carry a ServiceError and a close frame (not when it
    /// failed, nor when it is full: the goodbye would only wait on it).
    pub(crate) fn can_tell_peer(&self) -> bool {
        !matches!(
            self,
            LinkError::Socket(_) | LinkError::Stalled(_) | LinkError::CutOff(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_and_texts() {
        let silent = LinkError::Silent(Duration::from_secs(30));
        assert_eq!(silent.fault(), Fault::AppServer);
        assert_eq!(
            silent.to_string(),
            "Nothing was received from the app server for 30s."
        );
        assert_eq!(LinkError::Socket("reset".into()).fault(), Fault::Network);
        assert!(!LinkError::Socket("reset".into()).can_tell_peer());
        let queue = LinkError::Queue(CloseReason::SlowConsumer {
            pending_bytes: 10,
            budget: 5,
        });
        assert_eq!(queue.fault(), Fault::Service);
        assert_eq!(queue.code(), "slow_consumer");
    }
}

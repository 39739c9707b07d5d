//! What every endpoint reads, handed to each of them directly: the settings, token checks,
//! throttles, the refusals' log gate, metrics and the live trace.

use std::sync::Arc;

use switchyard_auth::AccessKeys;

use crate::auth::Auth;
use crate::config::ValidConfig;
use crate::live_trace::Tracer;
use crate::logs::Gate;
use crate::metrics::Metrics;
use crate::throttle::Throttle;

pub(crate) struct Shared {
    pub(crate) config: ValidConfig,
    /// Token checks against this service's keys, origins and token lifetime cap.
    pub(crate) auth: Auth,
    /// Connect and REST rates, negotiates and handshakes in progress.
    pub(crate) throttle: Throttle,
    /// Lets through a few refused-connect log lines a second (an outsider can cause them at
    /// will).
    pub(crate) refusals: Gate,
    pub(crate) metrics: Arc<Metrics>,
    /// The live trace (off unless an operator switched it on for a hub).
    pub(crate) tracer: Arc<Tracer>,
}

impl Shared {
    pub(crate) fn new(config: ValidConfig, metrics: Arc<Metrics>) -> Shared {
        let keys = AccessKeys::new(
            config
                .access_key
                .clone()
                .unwrap_or_else(|| switchyard_auth::EMULATOR_ACCESS_KEY.to_string()),
            config.secondary_access_key.clone(),
        );
        Shared {
            auth: Auth::new(keys, &config),
            throttle: Throttle::new(&config.throttling),
            refusals: Gate::new(crate::logs::REFUSALS_PER_SECOND),
            tracer: Arc::new(Tracer::new(&config.dashboard)),
            metrics,
            config,
        }
    }

    pub(crate) fn keys(&self) -> &AccessKeys {
        self.auth.keys()
    }
}

//! `metrics:`: the target's OpenMetrics / Prometheus endpoint (off unless configured).
//!
//! ```yaml
//! metrics:
//!   listen: 127.0.0.1:9464    # ADDR:PORT; port 0 picks a free one (tests)
//! ```

use serde::{Deserialize, Serialize};

/// Port Prometheus exporters conventionally pick for OpenTelemetry-style endpoints;
/// only the example configs and docs use it, the target never defaults to it.
pub const METRICS_EXAMPLE_PORT: u16 = 9464;

/// The metrics endpoint (`metrics:`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `ADDR:PORT` the HTTP endpoint (`GET /metrics`) listens on; IPv6 as `[::1]:PORT`.
    pub listen: String,
}

impl MetricsConfig {
    /// The listen address, when it is a valid `ADDR:PORT`.
    pub fn socket_addr(&self) -> Option<std::net::SocketAddr> {
        self.listen.parse().ok()
    }
}

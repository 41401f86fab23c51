//! Per-namespace QoS limits (SPDK's `bdev_set_qos_limit`, with IOPS and bytes per
//! second for reads, writes and both). 0 means unlimited.

use serde::{Deserialize, Serialize};

/// Largest IOPS limit accepted: far above any device, so a larger value is a typo.
pub const QOS_MAX_IOS_PER_SEC: u64 = 1_000_000_000;
/// Largest bytes-per-second limit accepted (1 TB/s).
pub const QOS_MAX_BYTES_PER_SEC: u64 = 1_000_000_000_000;

/// The limits of one namespace; each 0 = unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    /// Commands per second, reads and writes and every other I/O command together.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rw_ios_per_sec: u64,
    /// Read commands per second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub r_ios_per_sec: u64,
    /// Write commands per second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub w_ios_per_sec: u64,
    /// Bytes read and written per second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rw_bytes_per_sec: u64,
    /// Bytes read per second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub r_bytes_per_sec: u64,
    /// Bytes written per second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub w_bytes_per_sec: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The six limits in a fixed order: IOPS (rw, r, w), then bytes/s (rw, r, w).
pub const QOS_KINDS: usize = 6;
/// Key names of the limits, in [`QosConfig::as_array`] order.
pub const QOS_KEYS: [&str; QOS_KINDS] = [
    "rw_ios_per_sec",
    "r_ios_per_sec",
    "w_ios_per_sec",
    "rw_bytes_per_sec",
    "r_bytes_per_sec",
    "w_bytes_per_sec",
];

impl QosConfig {
    /// Whether no limit is set.
    pub fn is_unlimited(&self) -> bool {
        self.as_array().iter().all(|v| *v == 0)
    }

    /// The limits in [`QOS_KEYS`] order.
    pub fn as_array(&self) -> [u64; QOS_KINDS] {
        [
            self.rw_ios_per_sec,
            self.r_ios_per_sec,
            self.w_ios_per_sec,
            self.rw_bytes_per_sec,
            self.r_bytes_per_sec,
            self.w_bytes_per_sec,
        ]
    }

    /// The limits from an array in [`QOS_KEYS`] order.
    pub fn from_array(a: [u64; QOS_KINDS]) -> Self {
        let [rw_ios_per_sec, r_ios_per_sec, w_ios_per_sec, rw_bytes_per_sec, r_bytes_per_sec, w_bytes_per_sec] =
            a;
        QosConfig {
            rw_ios_per_sec,
            r_ios_per_sec,
            w_ios_per_sec,
            rw_bytes_per_sec,
            r_bytes_per_sec,
            w_bytes_per_sec,
        }
    }

    /// The first limit out of range, as (key, why).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        for (i, (key, v)) in QOS_KEYS.iter().zip(self.as_array()).enumerate() {
            let max = if i < 3 {
                QOS_MAX_IOS_PER_SEC
            } else {
                QOS_MAX_BYTES_PER_SEC
            };
            if v > max {
                return Err((
                    key,
                    format!("{v} is out of range: must be 0 (unlimited) to {max}"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const BASE: &str = "ports: []\nsubsystems:\n  - nqn: nqn.2024-01.io.test:a\n    allow_any_host: true\n    namespaces:\n      - nsid: 1\n        device_path: ram:1M\n";

    fn with_qos(qos: &str) -> Result<Config, String> {
        Config::from_yaml_str(&format!("{BASE}        qos: {qos}\n"), "t.yaml")
            .map_err(|e| e.to_string())
    }

    #[test]
    fn qos_limits_parse_and_round_trip() {
        let c = with_qos("{rw_ios_per_sec: 1000, r_bytes_per_sec: 1048576}").expect("valid");
        let q = c.subsystems[0].namespaces[0].qos;
        assert_eq!(q.rw_ios_per_sec, 1000);
        assert_eq!(q.r_bytes_per_sec, 1_048_576);
        assert!(!q.is_unlimited());
        let back = Config::from_yaml_str(&c.to_yaml().expect("yaml"), "t").expect("reread");
        assert_eq!(back, c);
        // Unlimited is left out of the written file.
        let plain = Config::from_yaml_str(BASE, "t").expect("valid");
        assert!(!plain.to_yaml().expect("yaml").contains("qos"));
    }

    #[test]
    fn qos_values_negative_or_absurd_are_refused() {
        let e = with_qos("{w_ios_per_sec: -5}").expect_err("negative");
        assert!(
            e.contains("subsystems[0].namespaces[0].qos.w_ios_per_sec"),
            "{e}"
        );
        let e = with_qos("{rw_ios_per_sec: 1000000001}").expect_err("absurd iops");
        assert!(
            e.contains(
                "subsystems[0].namespaces[0].qos.rw_ios_per_sec: 1000000001 is out of range"
            ),
            "{e}"
        );
        let e = with_qos("{r_bytes_per_sec: 1000000000001}").expect_err("absurd bytes");
        assert!(
            e.contains("qos.r_bytes_per_sec: 1000000000001 is out of range"),
            "{e}"
        );
        let e = with_qos("{rw_ios_per_sec: 1.5}").expect_err("fraction");
        assert!(e.contains("qos.rw_ios_per_sec"), "{e}");
        let e = with_qos("{iops: 5}").expect_err("unknown key");
        assert!(e.contains("qos"), "{e}");
    }
}

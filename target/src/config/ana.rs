//! ANA groups in the configuration (nvmet's configfs `ports/N/ana_groups/G/ana/state`
//! and a namespace's `ana_grpid`):
//!
//! ```yaml
//! ports:
//!   - portid: 2
//!     ...
//!     ana_groups:             # groups not listed are optimized on this port
//!       - { grpid: 1, state: non-optimized }
//!       - { grpid: 2, state: inaccessible }
//! subsystems:
//!   - ...
//!     namespaces:
//!       - { nsid: 1, device_path: /srv/a.img, anagrpid: 2 }   # default group 1
//! ```

use serde::{Deserialize, Serialize};

pub use nvmf_common::wire::ana::AnaState;

/// The state of one ANA group on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnaGroupConfig {
    /// ANA group id, 1 to 128.
    pub grpid: u32,
    pub state: AnaState,
}

//! The one operation model: a change to the running target is one [`Op`]. The same
//! type is the `ctl` subcommand (clap), the admin socket's request (serde, tagged by
//! `op`), what tests and embedders pass to [`super::Live::execute`], and what
//! [`super::edit`] turns into a new configuration that the planner applies whole or
//! refuses whole. Adding an operation touches this enum (its CLI and wire form come
//! with it) and `edit`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::{AnaState, Config, PortConfig, SubsystemConfig, TrType, Tsas};
use nvmf_common::types::Nqn;

use super::refusal::Refusal;

/// One administrative change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clap::Subcommand)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    /// Add a namespace: a file or block device path, ram:SIZE, null:SIZE or rbd:POOL/IMAGE.
    AddNs {
        nqn: String,
        device_path: String,
        /// NSID (default: the lowest free one).
        #[arg(long)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nsid: Option<u32>,
        /// rbd:POOL/IMAGE only: the Ceph configuration file (default: librados' search).
        #[arg(long)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ceph_conf: Option<PathBuf>,
        /// rbd:POOL/IMAGE only: the Ceph client id (default: admin).
        #[arg(long)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_id: Option<String>,
        /// rbd:POOL/IMAGE only: the keyring (default: what the Ceph configuration says).
        #[arg(long)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        keyring: Option<PathBuf>,
        /// rbd:POOL/IMAGE only: a Ceph client option, set after the Ceph configuration
        /// is read (repeatable; a later KEY wins), e.g. rados_osd_op_timeout=30.
        #[arg(long = "ceph-option", value_name = "KEY=VALUE", value_parser = parse_ceph_option)]
        #[serde(default, with = "options_map", skip_serializing_if = "Vec::is_empty")]
        ceph_options: Vec<(String, String)>,
        #[command(flatten)]
        #[serde(flatten)]
        create: Create,
        /// Visible only to the hosts added with ns-add-host (SPDK's --no-auto-visible);
        /// by default every host that may connect sees it.
        #[arg(long = "no-auto-visible", action = clap::ArgAction::SetFalse)]
        #[serde(default = "yes", skip_serializing_if = "is_true")]
        auto_visible: bool,
    },
    /// Remove a namespace (its data stays unless --delete-backing).
    RemoveNs {
        nqn: String,
        nsid: u32,
        /// Also delete the backing file or RBD image, which must be one the target
        /// created (add-ns --size); anything else is refused.
        #[arg(long)]
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        delete_backing: bool,
    },
    /// Let a host see a namespace added with --no-auto-visible (SPDK's
    /// nvmf_ns_add_host); its connected controllers get Namespace Attribute Changed.
    NsAddHost {
        nqn: String,
        nsid: u32,
        host: String,
    },
    /// Hide a namespace added with --no-auto-visible from a host again (SPDK's
    /// nvmf_ns_remove_host); to that host the NSID becomes inactive.
    NsRemoveHost {
        nqn: String,
        nsid: u32,
        host: String,
    },
    /// Add a subsystem (no namespaces, exported on no port until linked).
    AddSubsystem {
        nqn: String,
        /// Any host may connect (otherwise only hosts added with add-host).
        #[arg(long)]
        #[serde(default)]
        allow_any_host: bool,
        /// Serial number (default: derived from the NQN).
        #[arg(long)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        serial: Option<String>,
        /// Model number.
        #[arg(long)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// Export this NVMe controller (/dev/nvmeX) and all its namespaces as they
        /// are: a passthru subsystem (nvmet's passthru/device_path).
        #[arg(long, value_name = "CONTROLLER")]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        passthru_device: Option<std::path::PathBuf>,
        /// Passthru: hide the device's namespace identifiers (EUI-64, NGUID, UUID)
        /// from hosts, for a host that also sees the device locally.
        #[arg(long, requires = "passthru_device")]
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        clear_ids: bool,
    },
    /// Remove a subsystem (its hosts are disconnected; every port stops exporting it).
    RemoveSubsystem { nqn: String },
    /// Add a listener (configfs ports/N): tcp or rdma on TRADDR:TRSVCID, or loop.
    AddPort {
        portid: u16,
        #[arg(value_parser = parse_trtype)]
        trtype: TrType,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        #[arg(default_value = "")]
        traddr: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        #[arg(default_value = "")]
        trsvcid: String,
    },
    /// Remove a listener (hosts connected through it are disconnected).
    RemovePort { portid: u16 },
    /// Export a subsystem on a port (configfs ports/N/subsystems/NQN).
    LinkSubsystem { portid: u16, nqn: String },
    /// Stop exporting a subsystem on a port.
    UnlinkSubsystem { portid: u16, nqn: String },
    /// Serve a namespace at its backing file's, device's or RBD image's current size
    /// (with --size: grow the file or image to SIZE first; shrinking is refused).
    ResizeNs {
        nqn: String,
        nsid: u32,
        /// Grow the backing file or RBD image to SIZE bytes (K/M/G/T suffixes) first.
        #[arg(long, value_parser = parse_size_arg)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
    },
    /// Allow a host NQN on a subsystem.
    AddHost { nqn: String, host: String },
    /// Remove a host NQN from a subsystem's allowed hosts.
    RemoveHost { nqn: String, host: String },
    /// Set the ANA state of a group on a port: optimized, non-optimized, inaccessible,
    /// persistent-loss or change. Hosts connected through the port get an ANA change
    /// notice.
    SetAna {
        portid: u16,
        grpid: u32,
        #[arg(value_parser = parse_ana_state)]
        state: AnaState,
    },
    /// Set a host's DH-HMAC-CHAP key files (mode 0600; the target reads them, the
    /// secrets never cross the socket); used from the host's next authentication.
    SetHostKey {
        host: String,
        #[arg(long = "dhchap-key-file")]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_file: Option<PathBuf>,
        #[arg(long = "dhchap-ctrl-key-file")]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ctrl_key_file: Option<PathBuf>,
        /// Drop the controller key (unidirectional authentication from now on).
        #[arg(long = "clear-ctrl-key")]
        #[serde(default)]
        clear_ctrl_key: bool,
    },
    /// Set a namespace's QoS limits live (0 = unlimited; limits not given stay as
    /// they are). Held commands are never refused, they wait in their poll group.
    SetQos {
        nqn: String,
        nsid: u32,
        /// Commands per second, reads, writes and other I/O together.
        #[arg(long)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rw_ios: Option<u64>,
        /// Read commands per second.
        #[arg(long)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        r_ios: Option<u64>,
        /// Write commands per second.
        #[arg(long)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        w_ios: Option<u64>,
        /// Bytes read and written per second (K/M/G/T suffixes).
        #[arg(long, value_parser = parse_size_arg)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rw_bytes: Option<u64>,
        /// Bytes read per second (K/M/G/T suffixes).
        #[arg(long, value_parser = parse_size_arg)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        r_bytes: Option<u64>,
        /// Bytes written per second (K/M/G/T suffixes).
        #[arg(long, value_parser = parse_size_arg)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        w_bytes: Option<u64>,
    },
}

/// `add-ns`: creating the backing (a sparse file or an RBD image) instead of exporting
/// an existing one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
pub struct Create {
    /// Create the backing of SIZE bytes (K/M/G/T suffixes): a sparse file at the path,
    /// or the RBD image; refused if it exists (unless --reuse). Only what the target
    /// created may later be deleted (remove-ns --delete-backing).
    #[arg(long, value_parser = parse_size_arg)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// With --size: an existing backing is exported as it is (not created, never
    /// deleted by the target).
    #[arg(long, requires = "size")]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reuse: bool,
    /// With --size, rbd: only: the image's features, e.g. layering,exclusive-lock
    /// (default: the cluster's rbd_default_features).
    #[arg(long, requires = "size")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rbd_features: Option<String>,
    /// With --size, rbd: only: the pool the image's data goes to (an erasure-coded
    /// pool, say); the image's metadata stays in POOL.
    #[arg(long, requires = "size")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rbd_data_pool: Option<String>,
}

impl Op {
    /// An `add-ns` with no Ceph settings.
    pub fn add_ns(nqn: &str, nsid: Option<u32>, device_path: &str) -> Op {
        Op::AddNs {
            nqn: nqn.into(),
            device_path: device_path.into(),
            nsid,
            ceph_conf: None,
            client_id: None,
            keyring: None,
            ceph_options: Vec::new(),
            create: Create::default(),
            auto_visible: true,
        }
    }

    /// Paths as the target (another working directory) must see them.
    pub fn with_absolute_paths(self) -> Op {
        match self {
            Op::SetHostKey {
                host,
                key_file,
                ctrl_key_file,
                clear_ctrl_key,
            } => Op::SetHostKey {
                host,
                key_file: key_file.map(absolute),
                ctrl_key_file: ctrl_key_file.map(absolute),
                clear_ctrl_key,
            },
            other => other,
        }
    }

    /// The Ceph options of an `add-ns`, a later key winning.
    pub fn ceph_options(&self) -> BTreeMap<String, String> {
        match self {
            Op::AddNs { ceph_options, .. } => ceph_options.iter().cloned().collect(),
            _ => BTreeMap::new(),
        }
    }
}

/// Subsystems and ports: the new configuration, or why not (None: not one of these).
/// Checks that need the whole configuration (address in use, cntlid ranges) are the
/// planner's, as for a reloaded file.
pub(super) fn edit_topology(cfg: &mut Config, op: &Op) -> Option<Result<(), Refusal>> {
    let nqn_of = |s: &str| Nqn::new(s).map_err(|e| Refusal::invalid("nqn", e));
    let r = match op {
        Op::AddSubsystem {
            nqn,
            allow_any_host,
            serial,
            model,
            passthru_device,
            clear_ids,
        } => nqn_of(nqn).and_then(|n| {
            n.check_format().map_err(|e| Refusal::invalid("nqn", e))?;
            if cfg.subsystem(&n).is_some() {
                return Err(Refusal::exists(format!("subsystem {nqn} already exists")));
            }
            let mut s = SubsystemConfig::new(n);
            s.allow_any_host = *allow_any_host;
            s.serial.clone_from(serial);
            s.model.clone_from(model);
            if let Some(dev) = passthru_device {
                let mut p = crate::config::PassthruConfig::new(dev);
                p.clear_ids = *clear_ids;
                s.passthru = Some(p);
            } else if *clear_ids {
                return Err(Refusal::invalid("clear_ids", "only with passthru_device"));
            }
            cfg.subsystems.push(s);
            Ok(())
        }),
        Op::RemoveSubsystem { nqn } => nqn_of(nqn).and_then(|n| {
            let before = cfg.subsystems.len();
            cfg.subsystems.retain(|s| s.nqn != n);
            if cfg.subsystems.len() == before {
                return Err(Refusal::not_found(format!("no subsystem {nqn}")));
            }
            for p in &mut cfg.ports {
                p.subsystems.retain(|s| *s != n);
            }
            Ok(())
        }),
        Op::AddPort {
            portid,
            trtype,
            traddr,
            trsvcid,
        } => {
            if cfg.port(*portid).is_some() {
                Err(Refusal::exists(format!("port {portid} already exists")))
            } else {
                cfg.ports.push(PortConfig {
                    portid: *portid,
                    trtype: *trtype,
                    traddr: traddr.clone(),
                    trsvcid: trsvcid.clone(),
                    adrfam: None,
                    subsystems: Vec::new(),
                    referrals: Vec::new(),
                    ana_groups: Vec::new(),
                    tsas: Tsas::default(),
                    treq: None,
                });
                Ok(())
            }
        }
        Op::RemovePort { portid } => {
            let before = cfg.ports.len();
            cfg.ports.retain(|p| p.portid != *portid);
            if cfg.ports.len() == before {
                Err(Refusal::not_found(format!("no port {portid}")))
            } else {
                Ok(())
            }
        }
        Op::LinkSubsystem { portid, nqn } | Op::UnlinkSubsystem { portid, nqn } => {
            let link = matches!(op, Op::LinkSubsystem { .. });
            nqn_of(nqn).and_then(|n| {
                if cfg.subsystem(&n).is_none() {
                    return Err(Refusal::not_found(format!("no subsystem {nqn}")));
                }
                let Some(p) = cfg.ports.iter_mut().find(|p| p.portid == *portid) else {
                    return Err(Refusal::not_found(format!("no port {portid}")));
                };
                let linked = p.subsystems.contains(&n);
                match (link, linked) {
                    (true, true) => Err(Refusal::exists(format!(
                        "port {portid} already exports {nqn}"
                    ))),
                    (false, false) => Err(Refusal::not_found(format!(
                        "port {portid} does not export {nqn}"
                    ))),
                    (true, false) => {
                        p.subsystems.push(n);
                        Ok(())
                    }
                    (false, true) => {
                        p.subsystems.retain(|s| *s != n);
                        Ok(())
                    }
                }
            })
        }
        _ => return None,
    };
    Some(r)
}

fn yes() -> bool {
    true
}

fn is_true(v: &bool) -> bool {
    *v
}

/// A key file path as the target must see it.
fn absolute(p: PathBuf) -> PathBuf {
    std::path::absolute(&p).unwrap_or(p)
}

/// A size in bytes, with an optional K/M/G/T suffix (as `ram:SIZE`).
fn parse_size_arg(s: &str) -> Result<u64, String> {
    crate::config::spec::parse_size(s)
}

/// `KEY=VALUE` (the value may itself contain `=`).
fn parse_ceph_option(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err("expected KEY=VALUE, e.g. rados_osd_op_timeout=30".into()),
    }
}

fn parse_trtype(s: &str) -> Result<TrType, String> {
    s.parse::<TrType>().map_err(|e| e.to_string())
}

fn parse_ana_state(s: &str) -> Result<AnaState, String> {
    AnaState::from_name(s).ok_or_else(|| {
        format!("{s:?}: optimized, non-optimized, inaccessible, persistent-loss or change")
    })
}

/// Ceph options on the wire: a JSON object (`{"rados_osd_op_timeout":"30"}`), as the
/// YAML `ceph_options` map is written.
mod options_map {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
        let m: BTreeMap<&str, &str> = v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        m.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
        Ok(BTreeMap::<String, String>::deserialize(d)?
            .into_iter()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire form is the admin socket's documented one.
    #[test]
    fn wire_form_is_tagged_by_op() {
        let op = Op::AddNs {
            nqn: "nqn.2024-01.io.example:disk".into(),
            device_path: "rbd:rbd/img".into(),
            nsid: Some(2),
            ceph_conf: None,
            client_id: None,
            keyring: None,
            ceph_options: vec![("rados_osd_op_timeout".into(), "30".into())],
            create: Create::default(),
            auto_visible: true,
        };
        let j = serde_json::to_string(&op).unwrap();
        assert_eq!(
            j,
            r#"{"op":"add-ns","nqn":"nqn.2024-01.io.example:disk","device_path":"rbd:rbd/img","nsid":2,"ceph_options":{"rados_osd_op_timeout":"30"}}"#
        );
        assert_eq!(serde_json::from_str::<Op>(&j).unwrap(), op);
        let r: Op = serde_json::from_str(r#"{"op":"remove-ns","nqn":"n","nsid":3}"#).unwrap();
        assert_eq!(
            r,
            Op::RemoveNs {
                nqn: "n".into(),
                nsid: 3,
                delete_backing: false,
            }
        );
    }

    /// `ctl ns-add-host NQN NSID HOSTNQN` and `add-ns --no-auto-visible`, on the command
    /// line and on the wire.
    #[test]
    fn visibility_ops_parse_from_the_command_line() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            op: Op,
        }
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|c| c.op);
        let op = parse(&[
            "ctl",
            "ns-add-host",
            "nqn.2024-01.io.example:s",
            "3",
            "nqn.2024-01.io.example:h",
        ]);
        let want = Op::NsAddHost {
            nqn: "nqn.2024-01.io.example:s".into(),
            nsid: 3,
            host: "nqn.2024-01.io.example:h".into(),
        };
        assert_eq!(op.ok(), Some(want.clone()));
        let j = serde_json::to_string(&want).unwrap();
        assert!(j.starts_with(r#"{"op":"ns-add-host""#), "{j}");
        assert_eq!(serde_json::from_str::<Op>(&j).unwrap(), want);
        assert!(matches!(
            parse(&["ctl", "ns-remove-host", "n", "1", "h"]),
            Ok(Op::NsRemoveHost { nsid: 1, .. })
        ));
        let add = parse(&["ctl", "add-ns", "n", "ram:1M", "--no-auto-visible"]).unwrap();
        assert!(matches!(
            add,
            Op::AddNs {
                auto_visible: false,
                ..
            }
        ));
        let j = serde_json::to_string(&add).unwrap();
        assert!(j.contains(r#""auto_visible":false"#), "{j}");
        // Absent on the wire: visible to every host, as before the field existed.
        let old: Op =
            serde_json::from_str(r#"{"op":"add-ns","nqn":"n","device_path":"ram:1M"}"#).unwrap();
        assert_eq!(old, Op::add_ns("n", None, "ram:1M"));
        assert!(matches!(
            parse(&["ctl", "add-ns", "n", "ram:1M"]),
            Ok(Op::AddNs {
                auto_visible: true,
                ..
            })
        ));
    }
}

//! Live changes without a restart: a new configuration (SIGHUP re-reads the file) or an
//! admin command on the Unix socket ([`ctl`]) is turned into a [`plan`] against the
//! running configuration and applied whole, or refused whole with the reason.
//!
//! What can change while running: subsystems (added, removed), their allowed hosts,
//! namespaces (added, removed, reconfigured, resized after the backing file grew), and
//! ports (added, removed, moved, subsystem links and referrals) of the transports the
//! [`PortHooks`] can serve (NVMe/TCP: [`hooks`]; RDMA and loopback: [`rdma_hooks`]).
//! Connected hosts get Namespace Attribute Changed events and
//! the Changed Namespace List; discovery hosts get Discovery Log Page Change events.
//! Transport tuning and subsystem identities need a restart and are refused.
//!
//! Durable state: the configuration file (`--config`) is the one source of truth. A
//! change made through the socket is written into that file ([`crate::durable`]:
//! temporary file, fsync, rename, fsync of the directory) before it is applied and
//! acknowledged, so a reload, SIGHUP or restart yields exactly the running state.
//! The file is rewritten from the running configuration ([`Config::to_yaml`]): every
//! setting is kept, comments and layout of a hand-written file are not (a header
//! says so). A hand edit and a live change never undo each other: the target
//! remembers the bytes it last read or wrote, and a live change finding the file
//! edited since is refused until a reload applies the edit. A reload that is refused
//! leaves that so. Without `--config` changes live in memory only.
//!
//! Lock order: `running`, then `file`.

pub mod ctl;
pub mod ctl_cmd;
pub mod endpoint;
mod group;
pub mod hooks;
mod op;
mod plan;
mod provision;
mod qos_op;
pub mod rdma_hooks;
pub mod refusal;
pub mod status;
pub mod top;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tracing::{info, warn};

use crate::config::{
    AnaGroupConfig, AnaState, Config, GroupState, HostConfig, NamespaceConfig, SubsystemConfig,
    TrType,
};
use nvmf_common::types::{Nqn, Nsid};

use crate::group::GroupLink;
use crate::params::PortInfo;
use crate::runtime::PortError;
use crate::subsystem::MAX_NAMESPACES;
use crate::target::{DiscoveryScope, Target};
pub use op::{Create, Op};
use plan::Step;
pub use refusal::{Refusal, RefusalKind};

/// Starts and stops listeners for ports added or removed while running.
pub trait PortHooks: Send + Sync {
    /// Whether ports of `trtype` can be added and removed while running.
    fn can_serve(&self, trtype: TrType) -> bool;
    /// Starts listening on `port`; returns the bound address, or why it cannot.
    fn add_port(&self, port: &Arc<PortInfo>) -> Result<String, PortError>;
    /// Stops listening on port `portid`.
    fn remove_port(&self, portid: u16);
    /// The address port `portid` listens on, when known (status view).
    fn port_addr(&self, portid: u16) -> Option<String>;
    /// Poll-group counters of each running transport, by trtype (status view).
    fn counters(&self) -> Vec<(&'static str, crate::runtime::GroupCounters)> {
        Vec::new()
    }
}

/// Hooks that refuse every port change (ports fixed at startup).
pub struct FixedPorts;

impl PortHooks for FixedPorts {
    fn can_serve(&self, _: TrType) -> bool {
        false
    }
    fn add_port(&self, port: &Arc<PortInfo>) -> Result<String, PortError> {
        Err(PortError::Unsupported {
            portid: port.portid,
            trtype: port.trtype.as_str(),
        })
    }
    fn remove_port(&self, _: u16) {}
    fn port_addr(&self, _: u16) -> Option<String> {
        None
    }
}

/// The running target, its configuration and the listeners' hooks.
pub struct Live {
    target: Arc<Target>,
    running: Mutex<Config>,
    hooks: Arc<dyn PortHooks>,
    config_path: Option<PathBuf>,
    /// The config file's bytes as the target last read or wrote them (None: not
    /// known to match the running configuration; live changes wait for a reload).
    file: Mutex<Option<Vec<u8>>>,
    /// The gateway group this target is a gateway of: then the group's state, not
    /// the file, holds subsystems, hosts and ports ([`crate::group`]).
    group: OnceLock<Arc<GroupLink>>,
}

/// Where a change is stored before it is applied.
enum Save<'a> {
    /// The config file and its bytes now.
    File(&'a Path, Vec<u8>),
    /// The group: the version the change was planned on, the state read then, and the
    /// state to store.
    Group {
        link: &'a GroupLink,
        expect: Option<u64>,
        old: Box<GroupState>,
        new: Box<GroupState>,
    },
}

/// First lines of a configuration file the target rewrote.
const REWRITTEN_HEADER: &str = "\
# nvmf-target configuration. Live changes (nvmf-target ctl) rewrite this file before
# they are acknowledged: every setting is kept, comments and layout are not.
";

impl Live {
    /// `cfg` is what `target` was built from; `config_path` is re-read by [`Live::reload`].
    pub fn new(
        target: Arc<Target>,
        cfg: Config,
        hooks: Arc<dyn PortHooks>,
        config_path: Option<PathBuf>,
    ) -> Arc<Live> {
        // The file as it is now, if it still says what the target was built from. (A
        // gateway of a group keeps its changes in the group, never in its file.)
        let grouped = cfg.gateway_group.is_some();
        let file = config_path.as_ref().filter(|_| !grouped).and_then(|p| {
            let bytes = std::fs::read(p).ok()?;
            let text = std::str::from_utf8(&bytes).ok()?;
            // (Parsed only to compare: its warnings were logged when it was loaded.)
            let same = Config::parse_yaml_str(text, &p.display().to_string())
                .is_ok_and(|c| c == cfg);
            if !same {
                warn!(path = %p.display(), "the configuration file changed since it was read: live changes wait for a reload");
            }
            same.then_some(bytes)
        });
        Arc::new(Live {
            target,
            running: Mutex::new(cfg),
            hooks,
            config_path,
            file: Mutex::new(file),
            group: OnceLock::new(),
        })
    }

    /// Makes this target a gateway of `link`'s group (once, before it serves).
    pub fn join_group(&self, link: Arc<GroupLink>) {
        if self.group.set(link).is_err() {
            warn!("already a gateway of a group: the second join is ignored");
        }
    }

    /// The group this target is a gateway of.
    pub fn group(&self) -> Option<&Arc<GroupLink>> {
        self.group.get()
    }

    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }

    /// The `management:` section in force (who may call the API: read at each call).
    pub fn management(&self) -> Option<crate::config::ManagementConfig> {
        self.running.lock().management.clone()
    }

    /// The configuration in force.
    pub fn running(&self) -> Config {
        self.running.lock().clone()
    }

    /// Re-reads the config file (SIGHUP) and applies it.
    pub fn reload(&self) -> Result<Vec<String>, Refusal> {
        if let Some(g) = self.group.get() {
            return self.reload_in_group(g);
        }
        let Some(path) = &self.config_path else {
            return Err("the target was started without --config: nothing to re-read".into());
        };
        let mut running = self.running.lock();
        let bytes = std::fs::read(path).map_err(|e| {
            Refusal::new(
                RefusalKind::Unavailable,
                format!("{}: cannot read: {e}", path.display()),
            )
        })?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|e| format!("{}: not UTF-8: {e}", path.display()))?;
        let cfg =
            Config::from_yaml_str(text, &path.display().to_string()).map_err(|e| e.to_string())?;
        let changes = self.apply_locked(&mut running, cfg, &[], None)?;
        *self.file.lock() = Some(bytes);
        Ok(changes)
    }

    /// Moves the target to `new`, whole or not at all (not written anywhere: tests and
    /// embedders). Returns what changed.
    pub fn apply(&self, new: Config) -> Result<Vec<String>, Refusal> {
        let mut running = self.running.lock();
        self.apply_locked(&mut running, new, &[], None)
    }

    /// Runs one administrative change on a copy of the running configuration; with a
    /// config file, the change is in the file before it is applied.
    pub fn execute(&self, op: &Op) -> Result<Vec<String>, Refusal> {
        if let Some(g) = self.group.get() {
            return self.execute_in_group(g, op);
        }
        let mut running = self.running.lock();
        let mut new = running.clone();
        let mut resize = Vec::new();
        edit(&mut new, op, &mut resize)?;
        // (A change that leaves the configuration as it is, resize-ns, writes nothing.)
        let save = match &self.config_path {
            Some(path) if new != *running => {
                Some(Save::File(path.as_path(), self.unchanged_file(path)?))
            }
            _ => None,
        };
        // Storage first (the plan opens what add-ns --size creates), undone if refused.
        let done = provision::before(op, &running, &mut new)?;
        let old = running.clone();
        // What the change makes probably not meant goes back to whoever asked (a
        // subsystem built step by step is on no port until linked), not to the log.
        let notes = group::notes(&old, &new);
        match self.apply_locked(&mut running, new, &resize, save) {
            Ok(mut changes) => {
                changes.extend(provision::after(op, &old));
                changes.extend(notes);
                Ok(changes)
            }
            Err(e) => {
                provision::undo(done);
                Err(e)
            }
        }
    }

    /// The config file's bytes, when they are still what the target last read or
    /// wrote; otherwise why a live change must wait.
    fn unchanged_file(&self, path: &Path) -> Result<Vec<u8>, Refusal> {
        let now = std::fs::read(path).map_err(|e| {
            Refusal::new(
                RefusalKind::Unavailable,
                format!(
                    "{}: cannot read the configuration file to save the change: {e}; nothing changed",
                    path.display()
                ),
            )
        })?;
        if self.file.lock().as_deref() != Some(now.as_slice()) {
            let e = format!(
                "{} was edited since the target read it: apply it first (nvmf-target ctl reload, or SIGHUP), then repeat the change; nothing changed",
                path.display()
            );
            warn!("live change refused: {e}");
            return Err(Refusal::new(RefusalKind::Aborted, e));
        }
        Ok(now)
    }

    /// The running configuration as the file the target writes.
    pub fn export(&self) -> Result<String, String> {
        let yaml = self.running.lock().to_yaml().map_err(|e| e.to_string())?;
        Ok(format!("{REWRITTEN_HEADER}{yaml}"))
    }

    /// Plans `new` against `running` and applies it. With `save` (the config file and
    /// its current bytes), `new` is written into the file once the plan holds and
    /// before anything changes; a listener that then fails to bind restores the file.
    fn apply_locked(
        &self,
        running: &mut Config,
        new: Config,
        resize: &[(String, Nsid)],
        save: Option<Save<'_>>,
    ) -> Result<Vec<String>, Refusal> {
        let hooks = self.hooks.clone();
        let can = move |t: TrType| hooks.can_serve(t);
        let plan = plan::plan(running, &new, &self.target, &can, resize).inspect_err(|e| {
            warn!("configuration change refused: {e}");
        })?;
        // Key files are read again on every change, so a rotated file applies too.
        let policies = crate::auth::HostPolicies::build(&new.hosts).inspect_err(|e| {
            warn!("configuration change refused: {e}");
        })?;
        let written = match &save {
            Some(Save::File(path, _)) => Some(self.save(path, &new)?),
            _ => None,
        };
        let committed = match &save {
            Some(Save::Group {
                link, expect, new, ..
            }) => Some(group::commit(link, *expect, new)?),
            _ => None,
        };
        if let Err(e) = self.bind_ports(running, &plan.steps) {
            match &save {
                Some(Save::File(path, old)) => {
                    if let Err(e2) = crate::durable::write_atomic(path, old) {
                        warn!(path = %path.display(), "cannot restore the configuration file: {e2}");
                    }
                }
                Some(Save::Group { link, old, .. }) => group::revert(link, committed, old),
                None => {}
            }
            return Err(e.into());
        }
        if let Some(bytes) = written {
            *self.file.lock() = Some(bytes);
        }
        if let (
            Some(Save::Group {
                link, new: state, ..
            }),
            Some(v),
        ) = (&save, committed)
        {
            link.set_applied(Some(v), state);
            link.store().announce(v);
        }
        self.swap_in(plan.steps);
        let mut changes = plan.changes;
        for p in &new.ports {
            changes.extend(self.target.apply_ana(p));
        }
        for host in self.target.hosts.replace(policies) {
            changes.push(format!("host {host}: DH-HMAC-CHAP policy changed"));
        }
        for c in &changes {
            info!("live change: {c}");
        }
        *running = new;
        Ok(changes)
    }

    /// Writes `cfg` into the config file at `path` (atomically and durably).
    fn save(&self, path: &Path, cfg: &Config) -> Result<Vec<u8>, Refusal> {
        let yaml = cfg.to_yaml().map_err(|e| e.to_string())?;
        let bytes = format!("{REWRITTEN_HEADER}{yaml}").into_bytes();
        crate::durable::write_atomic(path, &bytes).map_err(|e| {
            let e = format!(
                "cannot save the change in {}: {e}; nothing changed",
                path.display()
            );
            warn!("live change refused: {e}");
            Refusal::new(RefusalKind::Unavailable, e)
        })?;
        Ok(bytes)
    }

    /// Listener changes first: they are the only steps that can still fail. On failure,
    /// what was done is undone and the whole change is refused.
    fn bind_ports(&self, running: &Config, steps: &[Step]) -> Result<(), String> {
        let mut removed: Vec<u16> = Vec::new();
        let mut added: Vec<u16> = Vec::new();
        for step in steps {
            let r = match step {
                Step::RemovePort(id) => {
                    self.hooks.remove_port(*id);
                    removed.push(*id);
                    Ok(())
                }
                Step::AddPort(p) => {
                    let info = Arc::new(plan::port_of(p, &self.target));
                    self.hooks
                        .add_port(&info)
                        .map(|addr| {
                            info!(portid = p.portid, %addr, "port listening");
                            added.push(p.portid);
                        })
                        .map_err(|e| e.to_string())
                }
                _ => Ok(()),
            };
            if let Err(e) = r {
                for id in added {
                    self.hooks.remove_port(id);
                }
                for id in removed {
                    if let Some(p) = running.port(id) {
                        if let Err(e2) = self
                            .hooks
                            .add_port(&Arc::new(plan::port_of(p, &self.target)))
                        {
                            warn!(portid = id, "could not restore the port: {e2}");
                        }
                    }
                }
                warn!("configuration change refused: {e}");
                return Err(e);
            }
        }
        Ok(())
    }

    /// Applies the infallible steps: new subsystems first (ports may link them), then
    /// ports, namespaces and hosts, and removed subsystems last. Then every namespace
    /// added, removed (alone or with its subsystem), resized or reconfigured is
    /// announced.
    fn swap_in(&self, steps: Vec<Step>) {
        use crate::events::NamespaceChange::{Added, Removed};
        let t = &self.target;
        let mut events = Vec::new();
        let (mut first, mut rest, mut last) = (Vec::new(), Vec::new(), Vec::new());
        for s in steps {
            match s {
                Step::AddSubsystem(_) => first.push(s),
                Step::RemoveSubsystem(_) => last.push(s),
                _ => rest.push(s),
            }
        }
        for step in first.into_iter().chain(rest).chain(last) {
            match step {
                Step::AddSubsystem(sub) => {
                    for n in sub.active_nsids() {
                        events.push(plan::ns_event(sub.nqn.as_str(), Nsid(n), Added));
                    }
                    t.add_subsystem(sub);
                }
                Step::RemoveSubsystem(nqn) => {
                    if let Some(sub) = t.remove_subsystem(&nqn) {
                        for n in sub.active_nsids() {
                            events.push(plan::ns_event(&nqn, Nsid(n), Removed));
                        }
                    }
                }
                Step::RemovePort(id) => {
                    t.remove_port(id);
                }
                Step::AddPort(p) => {
                    t.add_port(plan::port_of(&p, t));
                }
                Step::UpdatePort { port, unlinked } => {
                    t.add_port(plan::port_of(&port, t));
                    for nqn in unlinked {
                        if let Some(sub) = t.subsystem_by_name(&nqn) {
                            for c in sub.controllers() {
                                if c.port.portid == port.portid {
                                    c.fatal("subsystem no longer exported on this port");
                                }
                            }
                        }
                    }
                }
                Step::HostPolicy {
                    nqn,
                    allow_any_host,
                    hosts,
                } => {
                    if let Some(sub) = t.subsystem_by_name(&nqn) {
                        let (any_before, before) = (sub.allows_any_host(), sub.allowed_hosts());
                        sub.set_host_policy(allow_any_host, &hosts);
                        // Only hosts that gained or lost the subsystem see a change.
                        t.discovery_changed_for(DiscoveryScope::Exporting(&nqn), &|h| {
                            (any_before || before.contains(h)) != sub.host_allowed(h)
                        });
                    }
                }
                Step::AddNamespace { nqn, ns } => {
                    if let Some(sub) = t.subsystem_by_name(&nqn) {
                        let nsid = ns.nsid;
                        match sub.add_namespace(ns) {
                            Ok(()) => events.push(plan::ns_event(&nqn, nsid, Added)),
                            Err(e) => warn!("{e}"),
                        }
                    }
                }
                Step::RemoveNamespace { nqn, nsid } => {
                    if let Some(sub) = t.subsystem_by_name(&nqn) {
                        if sub.remove_namespace(nsid).is_some() {
                            events.push(plan::ns_event(&nqn, nsid, Removed));
                        }
                    }
                }
                Step::NamespaceVisibility {
                    nqn,
                    nsid,
                    auto_visible,
                    hosts,
                } => {
                    if let Some(sub) = t.subsystem_by_name(&nqn) {
                        sub.set_visibility(nsid, auto_visible, &hosts);
                    }
                }
                Step::SetQos { nqn, nsid, qos } => {
                    // Live: the poll groups pick the limits up; no host notice.
                    if let Some(n) = t.subsystem_by_name(&nqn).and_then(|s| s.namespace(nsid)) {
                        n.qos.set(&qos);
                    }
                }
                Step::ReplaceNamespace { nqn, ns, change } => {
                    if let Some(sub) = t.subsystem_by_name(&nqn) {
                        let nsid = ns.nsid;
                        match sub.replace_namespace(ns) {
                            Ok(_) => events.push(plan::ns_event(&nqn, nsid, change)),
                            Err(e) => warn!("{e}"),
                        }
                    }
                }
            }
        }
        for e in events {
            t.events.emit(e);
        }
    }

    /// The status view (ports, subsystems, namespaces, controllers, queues).
    pub fn status(&self) -> status::StatusView {
        let mut view = status::collect(&self.target, &self.running.lock(), self.hooks.as_ref());
        view.group = self.group.get().map(|g| status::group(g));
        view
    }
}

/// Applies `op` to `cfg`; namespaces to reopen go to `resize`.
fn edit(cfg: &mut Config, op: &Op, resize: &mut Vec<(String, Nsid)>) -> Result<(), Refusal> {
    if let Some(r) = op::edit_topology(cfg, op) {
        return r;
    }
    let nqn = match op {
        Op::AddNs { nqn, .. }
        | Op::RemoveNs { nqn, .. }
        | Op::ResizeNs { nqn, .. }
        | Op::AddHost { nqn, .. }
        | Op::RemoveHost { nqn, .. }
        | Op::NsAddHost { nqn, .. }
        | Op::NsRemoveHost { nqn, .. } => nqn,
        // Handled by `op::edit_topology` above.
        Op::AddSubsystem { .. }
        | Op::RemoveSubsystem { .. }
        | Op::AddPort { .. }
        | Op::RemovePort { .. }
        | Op::LinkSubsystem { .. }
        | Op::UnlinkSubsystem { .. } => return Ok(()),
        Op::SetHostKey {
            host,
            key_file,
            ctrl_key_file,
            clear_ctrl_key,
        } => return set_host_key(cfg, host, key_file, ctrl_key_file, *clear_ctrl_key),
        Op::SetAna {
            portid,
            grpid,
            state,
        } => return set_ana(cfg, *portid, *grpid, *state),
        Op::SetQos { .. } => return qos_op::set_qos(cfg, op),
    };
    let key = Nqn::new(nqn.clone()).map_err(|e| Refusal::invalid("nqn", e))?;
    let Some(sub) = cfg.subsystems.iter_mut().find(|s| s.nqn == key) else {
        return Err(Refusal::not_found(format!("no subsystem {nqn}")));
    };
    match op {
        Op::AddNs {
            nsid,
            device_path,
            ceph_conf,
            client_id,
            keyring,
            auto_visible,
            ..
        } => {
            let id = match nsid {
                Some(n) if !(1..=MAX_NAMESPACES).contains(n) => {
                    return Err(Refusal::invalid(
                        "nsid",
                        format!("{n} is not in 1..={MAX_NAMESPACES}"),
                    ))
                }
                Some(n) => *n,
                None => (1..=MAX_NAMESPACES)
                    .find(|i| sub.namespace(Nsid(*i)).is_none())
                    .ok_or_else(|| format!("subsystem {nqn} has no free nsid"))?,
            };
            if sub.namespace(Nsid(id)).is_some() {
                return Err(Refusal::exists(format!(
                    "subsystem {nqn} already has namespace {id}"
                )));
            }
            if device_path.is_empty() {
                return Err(Refusal::invalid("device_path", "empty"));
            }
            let mut ns = NamespaceConfig::new(Nsid(id), device_path.clone());
            ns.ceph_conf.clone_from(ceph_conf);
            ns.client_id.clone_from(client_id);
            ns.keyring.clone_from(keyring);
            ns.ceph_options = op.ceph_options();
            ns.auto_visible = *auto_visible;
            sub.namespaces.push(ns);
        }
        Op::RemoveNs { nsid, .. } => {
            let before = sub.namespaces.len();
            sub.namespaces.retain(|n| n.nsid != Nsid(*nsid));
            if sub.namespaces.len() == before {
                return Err(Refusal::not_found(format!(
                    "subsystem {nqn} has no namespace {nsid}"
                )));
            }
        }
        Op::ResizeNs { nsid, .. } => {
            if sub.namespace(Nsid(*nsid)).is_none_or(|n| !n.enable) {
                return Err(Refusal::not_found(format!(
                    "subsystem {nqn} has no enabled namespace {nsid}"
                )));
            }
            resize.push((nqn.clone(), Nsid(*nsid)));
        }
        Op::AddHost { host, .. } => {
            let h = Nqn::new(host.clone()).map_err(|e| Refusal::invalid("host", e))?;
            if sub.allowed_hosts.contains(&h) {
                return Err(Refusal::exists(format!(
                    "host {host} is already allowed on {nqn}"
                )));
            }
            sub.allowed_hosts.push(h);
        }
        Op::RemoveHost { host, .. } => {
            let h = Nqn::new(host.clone()).map_err(|e| Refusal::invalid("host", e))?;
            let before = sub.allowed_hosts.len();
            sub.allowed_hosts.retain(|x| *x != h);
            if sub.allowed_hosts.len() == before {
                return Err(Refusal::not_found(format!(
                    "host {host} is not in the allowed hosts of {nqn}"
                )));
            }
        }
        Op::NsAddHost { nsid, host, .. } => ns_host(sub, Nsid(*nsid), host, true)?,
        Op::NsRemoveHost { nsid, host, .. } => ns_host(sub, Nsid(*nsid), host, false)?,
        // Returned above: they name a host or a port, or change the topology.
        Op::SetHostKey { .. }
        | Op::SetAna { .. }
        | Op::SetQos { .. }
        | Op::AddSubsystem { .. }
        | Op::RemoveSubsystem { .. }
        | Op::AddPort { .. }
        | Op::RemovePort { .. }
        | Op::LinkSubsystem { .. }
        | Op::UnlinkSubsystem { .. } => {}
    }
    Ok(())
}

/// `ctl ns-add-host` / `ns-remove-host`: `host` joins or leaves the hosts that see
/// namespace `nsid` (one added with --no-auto-visible, as SPDK requires).
fn ns_host(sub: &mut SubsystemConfig, nsid: Nsid, host: &str, add: bool) -> Result<(), Refusal> {
    let h = crate::config::visibility::check_host(host).map_err(|e| Refusal::invalid("host", e))?;
    let nqn = sub.nqn.to_string();
    let Some(ns) = sub.namespaces.iter_mut().find(|n| n.nsid == nsid) else {
        return Err(Refusal::not_found(format!(
            "subsystem {nqn} has no namespace {nsid}"
        )));
    };
    if ns.auto_visible {
        // SPDK refuses it too (EPERM): the namespace would silently turn private.
        return Err(Refusal::from(format!(
            "namespace {nsid} of {nqn} is visible to every host; add it with \
             --no-auto-visible (auto_visible: false) to choose its hosts"
        )));
    }
    let listed = ns.visible_to.contains(&h);
    match (add, listed) {
        (true, true) => Err(Refusal::exists(format!(
            "namespace {nsid} of {nqn} is already visible to {host}"
        ))),
        (false, false) => Err(Refusal::not_found(format!(
            "namespace {nsid} of {nqn} is not visible to {host}"
        ))),
        (true, false) => {
            ns.visible_to.push(h);
            Ok(())
        }
        (false, true) => {
            ns.visible_to.retain(|x| *x != h);
            Ok(())
        }
    }
}

/// `ctl set-host-key`: points the host's entry at new key files (creating the entry).
fn set_host_key(
    cfg: &mut Config,
    host: &str,
    key_file: &Option<PathBuf>,
    ctrl_key_file: &Option<PathBuf>,
    clear_ctrl_key: bool,
) -> Result<(), Refusal> {
    let h = Nqn::new(host).map_err(|e| Refusal::invalid("host", e))?;
    if key_file.is_none() && ctrl_key_file.is_none() && !clear_ctrl_key {
        return Err(Refusal::invalid(
            "key_file",
            "nothing to set: give --dhchap-key-file, --dhchap-ctrl-key-file or --clear-ctrl-key",
        ));
    }
    let i = match cfg.hosts.iter().position(|e| e.nqn == h) {
        Some(i) => i,
        None => {
            cfg.hosts.push(HostConfig::new(h));
            cfg.hosts.len() - 1
        }
    };
    let Some(e) = cfg.hosts.get_mut(i) else {
        return Err(format!("host {host}: entry vanished").into());
    };
    if let Some(f) = key_file {
        e.dhchap_key = None;
        e.dhchap_key_file = Some(f.clone());
    }
    if let Some(f) = ctrl_key_file {
        e.dhchap_ctrl_key = None;
        e.dhchap_ctrl_key_file = Some(f.clone());
    }
    if clear_ctrl_key {
        e.dhchap_ctrl_key = None;
        e.dhchap_ctrl_key_file = None;
    }
    Ok(())
}

/// `ctl set-ana`: the state of one ANA group on one port (optimized removes the entry).
fn set_ana(cfg: &mut Config, portid: u16, grpid: u32, state: AnaState) -> Result<(), Refusal> {
    let max = nvmf_common::wire::ana::MAX_GROUPS;
    if grpid == 0 || grpid > max {
        return Err(Refusal::invalid(
            "grpid",
            format!("ANA group id {grpid} is not in 1..={max}"),
        ));
    }
    let Some(port) = cfg.ports.iter_mut().find(|p| p.portid == portid) else {
        return Err(Refusal::not_found(format!("no port {portid}")));
    };
    port.ana_groups.retain(|g| g.grpid != grpid);
    if state != AnaState::Optimized {
        port.ana_groups.push(AnaGroupConfig { grpid, state });
        port.ana_groups.sort_by_key(|g| g.grpid);
    }
    Ok(())
}

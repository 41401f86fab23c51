//! nvme-cli 2.x's plain and `-o json` shapes of the SMART / Health, Error Information,
//! Firmware Slot, Changed Namespace List and Commands Supported and Effects log pages
//! and of the Namespace Identification Descriptor list (`nvme-print-stdout.c`,
//! `nvme-print-json.c`): field names, units, order and nvme-cli's JSON keys.
//!
//! Owned by the CLI; pure functions of the page bytes (the commands that fetch them
//! are in `log_cmd.rs` and `ns_cmd.rs`). Two deliberate differences: numbers are
//! printed as nvme-cli prints them in the C locale (no thousands separator), and a
//! status is named by its short spec name, without libnvme's sentence after it.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use nvmf_common::wire::admin::{csi, opcode as admin_op};
use nvmf_common::wire::identify::{parse_ns_id_descriptors_at, NsIdDescriptor};
use nvmf_common::wire::log::{
    effects, parse_changed_ns_list, trtype, CmdEffectsLog, ErrorInfoEntry, FwSlotLog, SmartLog,
    CHANGED_NS_LIST_MAX, CHANGED_NS_LIST_OVERFLOW, ERROR_INFO_ENTRY_LEN, FW_SLOTS,
    SMART_TEMP_SENSORS,
};
use nvmf_common::wire::nvm::opcode as nvm_op;
use nvmf_common::wire::status::Status;

/// Kelvin to Celsius offset as nvme-cli has it (`ABSOLUTE_ZERO_CELSIUS`).
const ABSOLUTE_ZERO_CELSIUS: i64 = -273;
/// Data units of the SMART log: thousands of 512-byte units.
const DATA_UNIT_BYTES: f64 = 1000.0 * 512.0;
/// nvme-cli's SI suffixes, largest first (`util/suffix.c`).
const SI_SUFFIXES: [(f64, &str); 10] = [
    (1e30, "Q"),
    (1e27, "R"),
    (1e24, "Y"),
    (1e21, "Z"),
    (1e18, "E"),
    (1e15, "P"),
    (1e12, "T"),
    (1e9, "G"),
    (1e6, "M"),
    (1e3, "k"),
];
/// Width of nvme-cli's dashed rule under a table title.
const DASH_WIDTH: usize = 80;
/// Bits 15:14 and 18:16 of a command effects entry, shifted down.
const CSER_SHIFT: u32 = 14;
const CSE_SHIFT: u32 = 16;
/// Where the vendor-specific admin and I/O opcodes start in the effects table.
const VENDOR_IO_START: usize = 0x80;
/// nvme-cli's segment ends (exclusive) as it walks them: 0xbf and 0xff are not shown.
const ADMIN_SEGMENT_END: usize = 0xBF;
const VENDOR_ADMIN_SEGMENT_END: usize = 0xFF;
const OPCODES: usize = 0x100;

/// C's `%#x`: `0x`-prefixed lowercase hex, but a bare `0` for zero.
pub fn c_hex(v: u64) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

fn celsius(kelvin: u16) -> i64 {
    i64::from(kelvin) + ABSOLUTE_ZERO_CELSIUS
}

fn fahrenheit(kelvin: u16) -> i64 {
    celsius(kelvin) * 9 / 5 + 32
}

/// nvme-cli's temperature: `27 °C (300 K, 80 °F)`.
fn temperature(kelvin: u16) -> String {
    format!(
        "{} °C ({kelvin} K, {} °F)",
        celsius(kelvin),
        fahrenheit(kelvin)
    )
}

/// nvme-cli's `uint128_t_to_si_string`: `units` × `bytes_per_unit` as `%.2f` and an SI
/// prefix, e.g. `1.02 MB`.
pub fn si_string(units: u128, bytes_per_unit: f64) -> String {
    // f64 is nvme-cli's long double here: the figure is rounded to two places anyway.
    let mut bytes = units as f64 * bytes_per_unit;
    let mut suffix = "";
    for (magnitude, s) in SI_SUFFIXES {
        if bytes >= magnitude {
            bytes /= magnitude;
            suffix = s;
            break;
        }
    }
    format!("{bytes:.2} {suffix}B")
}

/// A 128-bit counter as a JSON number (nvme-cli prints the digits unquoted); counters
/// past 2^64 become a float, the nearest JSON number serde_json can hold.
fn json_u128(v: u128) -> Value {
    match u64::try_from(v) {
        Ok(x) => json!(x),
        Err(_) => json!(v as f64),
    }
}

// ---- SMART / Health Information ----

/// The bits of the critical warning in nvme-cli's `-H` order: (plain label, JSON key).
const CRITICAL_WARNING_BITS: [(&str, &str); 6] = [
    ("Available Spare[0]            ", "available_spare"),
    ("Temp. Threshold[1]            ", "temp_threshold"),
    ("NVM subsystem Reliability[2]  ", "reliability_degraded"),
    ("Read-only[3]                  ", "ro"),
    ("Volatile mem. backup failed[4]", "vmbu_failed"),
    ("Persistent Mem. RO[5]         ", "pmr_ro"),
];

fn warning_bit(v: u8, bit: usize) -> u8 {
    (v >> bit) & 1
}

/// `nvme smart-log`, plain; `human` adds the critical warning bits (`-H`).
pub fn format_smart(page: &[u8], nsid: u32, dev: &str, human: bool) -> Option<String> {
    let s = SmartLog::new_checked(page).ok()?;
    let mut o = String::new();
    let _ = writeln!(o, "Smart Log for NVME device:{dev} namespace-id:{nsid:x}");
    let cw = s.critical_warning();
    let _ = writeln!(o, "critical_warning\t\t\t: {}", c_hex(cw.into()));
    if human {
        for (i, (label, _)) in CRITICAL_WARNING_BITS.iter().enumerate() {
            let _ = writeln!(o, "      {label} : {}", warning_bit(cw, i));
        }
    }
    let _ = writeln!(o, "temperature\t\t\t\t: {}", temperature(s.temperature()));
    let _ = writeln!(o, "available_spare\t\t\t\t: {}%", s.avail_spare());
    let _ = writeln!(o, "available_spare_threshold\t\t: {}%", s.spare_thresh());
    let _ = writeln!(o, "percentage_used\t\t\t\t: {}%", s.percent_used());
    let _ = writeln!(
        o,
        "endurance group critical warning summary: {}",
        c_hex(s.endu_grp_crit_warn_sumry().into())
    );
    let dur = s.data_units_read();
    let duw = s.data_units_written();
    let _ = writeln!(
        o,
        "Data Units Read\t\t\t\t: {dur} ({})",
        si_string(dur, DATA_UNIT_BYTES)
    );
    let _ = writeln!(
        o,
        "Data Units Written\t\t\t: {duw} ({})",
        si_string(duw, DATA_UNIT_BYTES)
    );
    let _ = writeln!(o, "host_read_commands\t\t\t: {}", s.host_reads());
    let _ = writeln!(o, "host_write_commands\t\t\t: {}", s.host_writes());
    let _ = writeln!(o, "controller_busy_time\t\t\t: {}", s.ctrl_busy_time());
    let _ = writeln!(o, "power_cycles\t\t\t\t: {}", s.power_cycles());
    let _ = writeln!(o, "power_on_hours\t\t\t\t: {}", s.power_on_hours());
    let _ = writeln!(o, "unsafe_shutdowns\t\t\t: {}", s.unsafe_shutdowns());
    let _ = writeln!(o, "media_errors\t\t\t\t: {}", s.media_errors());
    let _ = writeln!(o, "num_err_log_entries\t\t\t: {}", s.num_err_log_entries());
    let _ = writeln!(o, "Warning Temperature Time\t\t: {}", s.warning_temp_time());
    let _ = writeln!(
        o,
        "Critical Composite Temperature Time\t: {}",
        s.critical_comp_time()
    );
    for i in 0..SMART_TEMP_SENSORS {
        let t = s.temp_sensor(i);
        if t != 0 {
            let _ = writeln!(o, "Temperature Sensor {}\t\t\t: {}", i + 1, temperature(t));
        }
    }
    let _ = writeln!(
        o,
        "Thermal Management T1 Trans Count\t: {}",
        s.thm_temp1_trans_count()
    );
    let _ = writeln!(
        o,
        "Thermal Management T2 Trans Count\t: {}",
        s.thm_temp2_trans_count()
    );
    let _ = writeln!(
        o,
        "Thermal Management T1 Total Time\t: {}",
        s.thm_temp1_total_time()
    );
    let _ = writeln!(
        o,
        "Thermal Management T2 Total Time\t: {}",
        s.thm_temp2_total_time()
    );
    Some(o)
}

/// `nvme smart-log -o json`; `human` makes `critical_warning` an object of its bits.
pub fn smart_json(page: &[u8], human: bool) -> Option<Value> {
    let s = SmartLog::new_checked(page).ok()?;
    let mut r = Map::new();
    let cw = s.critical_warning();
    if human {
        let mut crt = Map::new();
        crt.insert("value".into(), json!(cw));
        for (i, (_, key)) in CRITICAL_WARNING_BITS.iter().enumerate() {
            crt.insert((*key).into(), json!(warning_bit(cw, i)));
        }
        r.insert("critical_warning".into(), Value::Object(crt));
    } else {
        r.insert("critical_warning".into(), json!(cw));
    }
    let head: [(&str, Value); 17] = [
        ("temperature", json!(s.temperature())),
        ("avail_spare", json!(s.avail_spare())),
        ("spare_thresh", json!(s.spare_thresh())),
        ("percent_used", json!(s.percent_used())),
        (
            "endurance_grp_critical_warning_summary",
            json!(s.endu_grp_crit_warn_sumry()),
        ),
        ("data_units_read", json_u128(s.data_units_read())),
        ("data_units_written", json_u128(s.data_units_written())),
        ("host_read_commands", json_u128(s.host_reads())),
        ("host_write_commands", json_u128(s.host_writes())),
        ("controller_busy_time", json_u128(s.ctrl_busy_time())),
        ("power_cycles", json_u128(s.power_cycles())),
        ("power_on_hours", json_u128(s.power_on_hours())),
        ("unsafe_shutdowns", json_u128(s.unsafe_shutdowns())),
        ("media_errors", json_u128(s.media_errors())),
        ("num_err_log_entries", json_u128(s.num_err_log_entries())),
        ("warning_temp_time", json!(s.warning_temp_time())),
        ("critical_comp_time", json!(s.critical_comp_time())),
    ];
    let tail: [(&str, Value); 4] = [
        ("thm_temp1_trans_count", json!(s.thm_temp1_trans_count())),
        ("thm_temp2_trans_count", json!(s.thm_temp2_trans_count())),
        ("thm_temp1_total_time", json!(s.thm_temp1_total_time())),
        ("thm_temp2_total_time", json!(s.thm_temp2_total_time())),
    ];
    for (k, v) in head {
        r.insert(k.into(), v);
    }
    // The present sensors go between critical_comp_time and the thermal counters.
    for i in 0..SMART_TEMP_SENSORS {
        let t = s.temp_sensor(i);
        if t != 0 {
            r.insert(format!("temperature_sensor_{}", i + 1), json!(t));
        }
    }
    for (k, v) in tail {
        r.insert(k.into(), v);
    }
    Some(Value::Object(r))
}

// ---- Error Information ----

/// nvme-cli's `nvme_trtype_to_string` for the error log.
fn trtype_error_name(t: u8) -> &'static str {
    match t {
        trtype::PCI => "The transport type is not indicated or the error is not transport related",
        trtype::RDMA => "RDMA Transport error",
        trtype::FC => "Fibre Channel Transport error",
        trtype::TCP => "TCP Transport error",
        trtype::LOOP => "Intra-host Transport error",
        _ => "Reserved",
    }
}

fn error_entries(page: &[u8], entries: usize) -> impl Iterator<Item = ErrorInfoEntry<&[u8]>> {
    page.chunks_exact(ERROR_INFO_ENTRY_LEN)
        .take(entries)
        .map(ErrorInfoEntry::new_unchecked)
}

/// `nvme error-log`, plain: `entries` entries of `page`.
pub fn format_error_log(page: &[u8], entries: usize, dev: &str) -> String {
    let shown = entries.min(page.len() / ERROR_INFO_ENTRY_LEN);
    let mut o = format!("Error Log Entries for device:{dev} entries:{shown}\n.................\n");
    for (i, e) in error_entries(page, entries).enumerate() {
        let field = e.status_field();
        let status = field >> 1;
        let _ = write!(
            o,
            " Entry[{i:2}]\n.................\n\
             error_count\t: {}\n\
             sqid\t\t: {}\n\
             cmdid\t\t: {}\n\
             status_field\t: {} ({})\n\
             phase_tag\t: {}\n\
             parm_err_loc\t: {}\n\
             lba\t\t: {}\n\
             nsid\t\t: {}\n\
             vs\t\t: {}\n\
             trtype\t\t: {} ({})\n\
             csi\t\t: {}\n\
             opcode\t\t: {}\n\
             cs\t\t: {}\n\
             trtype_spec_info: {}\n\
             log_page_version: {}\n\
             .................\n",
            e.error_count(),
            e.sqid(),
            c_hex(e.cmdid().into()),
            c_hex(status.into()),
            Status::from_field(status).name(),
            c_hex((field & 1).into()),
            c_hex(e.param_error_location().into()),
            c_hex(e.lba()),
            c_hex(e.nsid().into()),
            e.vs(),
            c_hex(e.trtype().into()),
            trtype_error_name(e.trtype()),
            e.csi(),
            c_hex(e.opcode().into()),
            c_hex(e.cs()),
            c_hex(e.trtype_spec_info().into()),
            e.lpv(),
        );
    }
    o
}

/// `nvme error-log -o json`.
pub fn error_log_json(page: &[u8], entries: usize) -> Value {
    let errors: Vec<Value> = error_entries(page, entries)
        .map(|e| {
            json!({
                "error_count": e.error_count(),
                "sqid": e.sqid(),
                "cmdid": e.cmdid(),
                "status_field": e.status_field() >> 1,
                "phase_tag": e.status_field() & 1,
                "parm_error_location": e.param_error_location(),
                "lba": e.lba(),
                "nsid": e.nsid(),
                "vs": e.vs(),
                "trtype": e.trtype(),
                "cs": e.cs(),
                "trtype_spec_info": e.trtype_spec_info(),
            })
        })
        .collect();
    json!({ "errors": errors })
}

// ---- Firmware Slot Information ----

/// nvme-cli's `util_fw_to_string`: printable ASCII kept, anything else a dot.
fn fw_string(frs: &[u8; 8]) -> String {
    frs.iter()
        .map(|&c| if c.is_ascii_graphic() { c as char } else { '.' })
        .collect()
}

/// The slots nvme-cli lists (first byte non-zero): (slot, revision as u64, text).
fn fw_slots(f: &FwSlotLog<&[u8]>) -> Vec<(usize, u64, String)> {
    (1..=FW_SLOTS)
        .map(|slot| (slot, f.frs(slot)))
        .filter(|(_, frs)| frs[0] != 0)
        .map(|(slot, frs)| (slot, u64::from_le_bytes(frs), fw_string(&frs)))
        .collect()
}

/// `nvme fw-log`, plain.
pub fn format_fw_log(page: &[u8], dev: &str) -> Option<String> {
    let f = FwSlotLog::new_checked(page).ok()?;
    let mut o = format!(
        "Firmware Log for device:{dev}\nafi  : {}\n",
        c_hex(f.afi().into())
    );
    for (slot, v, s) in fw_slots(&f) {
        let _ = writeln!(o, "frs{slot} : {v:#016x} ({s})");
    }
    Some(o)
}

/// `nvme fw-log -o json`.
pub fn fw_log_json(page: &[u8], dev: &str) -> Option<Value> {
    let f = FwSlotLog::new_checked(page).ok()?;
    let mut fwsi = Map::new();
    fwsi.insert("Active Firmware Slot (afi)".into(), json!(f.afi()));
    for (slot, v, s) in fw_slots(&f) {
        fwsi.insert(
            format!("Firmware Rev Slot {slot}"),
            json!(format!("{v} ({s})")),
        );
    }
    let mut r = Map::new();
    r.insert(dev.into(), Value::Object(fwsi));
    Some(Value::Object(r))
}

// ---- Changed Namespace List ----

/// `nvme changed-ns-list-log`, plain (nvme-cli's lines: 0-based index, then "no ns
/// changed" at the end of the list).
pub fn format_changed_ns(page: &[u8]) -> String {
    let list = parse_changed_ns_list(page);
    if list.first() == Some(&CHANGED_NS_LIST_OVERFLOW) {
        return format!("more than {CHANGED_NS_LIST_MAX} ns changed\n");
    }
    let mut o = String::new();
    for (i, nsid) in list.iter().enumerate() {
        let _ = writeln!(o, "[{i:4}]:{}", c_hex((*nsid).into()));
    }
    if list.len() < CHANGED_NS_LIST_MAX {
        o.push_str("no ns changed\n");
    }
    o
}

/// `nvme changed-ns-list-log -o json` (1-based keys); `None` for an overflowed list,
/// for which nvme-cli prints nothing.
pub fn changed_ns_json(page: &[u8], dev: &str) -> Option<Value> {
    let list = parse_changed_ns_list(page);
    if list.first() == Some(&CHANGED_NS_LIST_OVERFLOW) {
        return None;
    }
    let mut nsi = Map::new();
    for (i, nsid) in list.iter().enumerate() {
        nsi.insert(format!("[{:4}]", i + 1), json!(c_hex((*nsid).into())));
    }
    let mut r = Map::new();
    r.insert("Changed Attached Namespace List Log".into(), json!(dev));
    r.insert(dev.into(), Value::Object(nsi));
    Some(Value::Object(r))
}

// ---- Commands Supported and Effects ----

/// nvme-cli's `nvme_cmd_to_string` for the opcodes this crate names.
pub fn command_name(admin: bool, op: u8) -> &'static str {
    if admin {
        match op {
            admin_op::DELETE_SQ => "Delete I/O Submission Queue",
            admin_op::CREATE_SQ => "Create I/O Submission Queue",
            admin_op::GET_LOG_PAGE => "Get Log Page",
            admin_op::DELETE_CQ => "Delete I/O Completion Queue",
            admin_op::CREATE_CQ => "Create I/O Completion Queue",
            admin_op::IDENTIFY => "Identify",
            admin_op::ABORT => "Abort",
            admin_op::SET_FEATURES => "Set Features",
            admin_op::GET_FEATURES => "Get Features",
            admin_op::ASYNC_EVENT_REQUEST => "Asynchronous Event Request",
            admin_op::NS_MGMT => "Namespace Management",
            admin_op::FW_COMMIT => "Firmware Commit",
            admin_op::FW_DOWNLOAD => "Firmware Image Download",
            admin_op::DEVICE_SELF_TEST => "Device Self-test",
            admin_op::NS_ATTACH => "Namespace Attachment",
            admin_op::KEEP_ALIVE => "Keep Alive",
            admin_op::DIRECTIVE_SEND => "Directive Send",
            admin_op::DIRECTIVE_RECEIVE => "Directive Receive",
            admin_op::VIRTUALIZATION_MGMT => "Virtualization Management",
            admin_op::NVME_MI_SEND => "NVMe-MI Send",
            admin_op::NVME_MI_RECEIVE => "NVMe-MI Receive",
            admin_op::DOORBELL_BUFFER_CONFIG => "Doorbell Buffer Config",
            admin_op::FABRICS => "Fabrics Commands",
            admin_op::FORMAT_NVM => "Format NVM",
            admin_op::SECURITY_SEND => "Security Send",
            admin_op::SECURITY_RECEIVE => "Security Receive",
            admin_op::SANITIZE => "Sanitize",
            admin_op::GET_LBA_STATUS => "Get LBA Status",
            _ => "Unknown",
        }
    } else {
        match op {
            nvm_op::FLUSH => "Flush",
            nvm_op::WRITE => "Write",
            nvm_op::READ => "Read",
            nvm_op::WRITE_UNCORRECTABLE => "Write Uncorrectable",
            nvm_op::COMPARE => "Compare",
            nvm_op::WRITE_ZEROES => "Write Zeroes",
            nvm_op::DATASET_MANAGEMENT => "Dataset Management",
            nvm_op::RESERVATION_REGISTER => "Reservation Register",
            nvm_op::RESERVATION_REPORT => "Reservation Report",
            nvm_op::RESERVATION_ACQUIRE => "Reservation Acquire",
            nvm_op::RESERVATION_RELEASE => "Reservation Release",
            nvm_op::VERIFY => "Verify",
            nvm_op::COPY => "Copy",
            _ => "Unknown",
        }
    }
}

fn csi_title(c: u8) -> &'static str {
    match c {
        csi::NVM => "NVM Command Set Log Page",
        csi::KV => "KV Command Set Log Page",
        csi::ZNS => "ZNS Command Set Log Page",
        _ => "Unknown Command Set Log Page",
    }
}

/// nvme-cli's `-H` decoding of one effects entry.
fn effects_human(e: u32) -> String {
    let f = |bit: u32| if e & bit != 0 { "+" } else { "-" };
    let cser = match (e & effects::CSER_MASK) >> CSER_SHIFT {
        0 => "No CSER defined",
        1 => "No admin command for any namespace",
        _ => "Reserved CSER",
    };
    let cse = match (e & effects::CSE_MASK) >> CSE_SHIFT {
        0 => "No command restriction",
        1 => "No other command for same namespace",
        2 => "No other command for any namespace",
        _ => "Reserved CSE",
    };
    format!(
        "  CSUPP+  LBCC{}  NCC{}  NIC{}  CCC{}  USS{}  {cser}\n  {cse}\n",
        f(effects::LBCC),
        f(effects::NCC),
        f(effects::NIC),
        f(effects::CCC),
        f(effects::UUID_SEL)
    )
}

fn effects_segment(
    o: &mut String,
    log: &CmdEffectsLog<&[u8]>,
    admin: bool,
    ops: std::ops::Range<usize>,
    title: &str,
    human: bool,
) {
    let mut body = String::new();
    for i in ops {
        let Ok(op) = u8::try_from(i) else { break };
        let e = if admin { log.acs(op) } else { log.iocs(op) };
        if e & effects::CSUPP == 0 {
            continue;
        }
        let name = command_name(admin, op);
        let _ = if admin {
            write!(body, "ACS{i:<6}[{name:<32}] {e:08x}")
        } else {
            write!(body, "IOCS{i:<5}[{name:<32}] {e:08x}")
        };
        if human {
            body.push_str(&effects_human(e));
        } else {
            body.push('\n');
        }
    }
    if !body.is_empty() {
        let _ = write!(o, "{title}\n{body}\n");
    }
}

/// `nvme effects-log`, plain, for one command set's page.
pub fn format_effects(page: &[u8], command_set: u8, human: bool) -> Option<String> {
    let log = CmdEffectsLog::new_checked(page).ok()?;
    let mut o = format!("{}\n{}\n", csi_title(command_set), "-".repeat(DASH_WIDTH));
    let segments = [
        (true, 0..ADMIN_SEGMENT_END, "Admin Commands"),
        (
            true,
            usize::from(admin_op::VENDOR_START)..VENDOR_ADMIN_SEGMENT_END,
            "Vendor Specific Admin Commands",
        ),
        (false, 0..VENDOR_IO_START, "I/O Commands"),
        (
            false,
            VENDOR_IO_START..OPCODES,
            "Vendor Specific I/O Commands",
        ),
    ];
    for (admin, ops, title) in segments {
        effects_segment(&mut o, &log, admin, ops, title, human);
    }
    Some(o)
}

/// One element of `nvme effects-log -o json`'s array.
pub fn effects_json(page: &[u8], command_set: u8) -> Option<Value> {
    let log = CmdEffectsLog::new_checked(page).ok()?;
    let table = |admin: bool| {
        let mut m = Map::new();
        for op in 0..=u8::MAX {
            let e = if admin { log.acs(op) } else { log.iocs(op) };
            if e & effects::CSUPP != 0 {
                let key = if admin { "ACS" } else { "IOCS" };
                m.insert(
                    format!("{key}_{op} ({})", command_name(admin, op)),
                    json!(e),
                );
            }
        }
        Value::Object(m)
    };
    Some(json!({
        "command_set_identifier": command_set,
        "admin_cmd_set": table(true),
        "io_cmd_set": table(false),
    }))
}

// ---- Namespace Identification Descriptors ----

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// (type name, value as nvme-cli prints it) of one descriptor.
fn desc_text(d: &NsIdDescriptor) -> (&'static str, String) {
    match d {
        NsIdDescriptor::Eui64(v) => ("eui64", hex(v)),
        NsIdDescriptor::Nguid(v) => ("nguid", hex(v)),
        NsIdDescriptor::Uuid(v) => ("uuid", uuid::Uuid::from_bytes(*v).to_string()),
        NsIdDescriptor::Csi(v) => ("csi", c_hex((*v).into())),
    }
}

/// `nvme ns-descs`, plain; `verbose` adds loc, nidt, nidl and the type (`-v`).
pub fn format_ns_descs(page: &[u8], nsid: u32, verbose: bool) -> String {
    let mut o = format!("NVME Namespace Identification Descriptors NS {nsid}:\n");
    for (loc, d) in parse_ns_id_descriptors_at(page) {
        let (name, value) = desc_text(&d);
        if verbose {
            let _ = write!(
                o,
                "loc     : {loc}\nnidt    : {}\nnidl    : {}\ntype    : {name}\n",
                d.nidt(),
                d.nidl()
            );
        }
        let _ = writeln!(o, "{name:<8}: {value}");
    }
    o
}

/// `nvme ns-descs -o json`: `{"ns-descs": [...]}`, or `{}` when there are none.
pub fn ns_descs_json(page: &[u8]) -> Value {
    let descs: Vec<Value> = parse_ns_id_descriptors_at(page)
        .into_iter()
        .map(|(loc, d)| {
            let (name, value) = desc_text(&d);
            let mut m = Map::new();
            m.insert("loc".into(), json!(loc));
            m.insert("nidt".into(), json!(d.nidt()));
            m.insert("nidl".into(), json!(d.nidl()));
            m.insert("Type".into(), json!(name));
            m.insert(name.into(), json!(value));
            Value::Object(m)
        })
        .collect();
    let mut r = Map::new();
    if !descs.is_empty() {
        r.insert("ns-descs".into(), Value::Array(descs));
    }
    Value::Object(r)
}

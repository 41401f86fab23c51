//! Unit tests of the named log page, `compare` and `ns-descs` commands: their flags and
//! nvme-cli's output shapes (golden lines from nvme-cli 2.x's printers).

use clap::Parser;
use serde_json::json;

use nvmf_common::wire::admin::csi;
use nvmf_common::wire::fabrics::cap_css;
use nvmf_common::wire::identify::{write_ns_id_descriptors, NsIdDescriptor, IDENTIFY_LEN};
use nvmf_common::wire::log::{
    effects, fw_afi, trtype, write_changed_ns_list, CmdEffectsLog, ErrorInfoEntry, FwSlotLog,
    SmartLog, CHANGED_NS_LIST_LEN, CMD_EFFECTS_LOG_LEN, ERROR_INFO_ENTRY_LEN, FW_SLOT_LOG_LEN,
    SMART_LOG_LEN,
};
use nvmf_common::wire::nvm::opcode as io;
use nvmf_common::wire::status::{generic, Status};

use super::log_cmd::effects_command_sets;
use super::log_print::*;
use super::ns_cmd::compare_extent;
use super::*;

fn parse(args: &[&str]) -> Command {
    let mut v = vec!["nvmf-initiator"];
    v.extend_from_slice(args);
    Cli::try_parse_from(v)
        .unwrap_or_else(|e| panic!("{e}"))
        .command
}

#[test]
fn log_flags_like_nvme_cli() {
    let Command::SmartLog(s) = parse(&[
        "smart-log",
        "-t",
        "tcp",
        "-a",
        "10.0.0.1",
        "-n",
        "nqn.x:y",
        "--nsid",
        "1",
        "-H",
        "-o",
        "json",
    ]) else {
        panic!("not smart-log")
    };
    assert_eq!((s.nsid, s.human_readable), (1, true));
    assert_eq!(s.out.output_format, OutputFormat::Json);
    let Command::SmartLog(s) = parse(&["smart-log", "-t", "tcp"]) else {
        panic!("not smart-log")
    };
    assert_eq!(s.nsid, u32::MAX, "the controller by default, as nvme-cli");
    let Command::ErrorLog(e) = parse(&["error-log", "-t", "tcp", "-e", "4", "-b"]) else {
        panic!("not error-log")
    };
    assert_eq!((e.log_entries, e.out.raw_binary), (4, true));
    let Command::ErrorLog(e) = parse(&["error-log", "-t", "tcp"]) else {
        panic!("not error-log")
    };
    assert_eq!(e.log_entries, 64);
    assert!(matches!(parse(&["fw-log", "-t", "tcp"]), Command::FwLog(_)));
    assert!(matches!(
        parse(&["changed-ns-list-log", "-t", "tcp", "-o", "json"]),
        Command::ChangedNsListLog(_)
    ));
    let Command::EffectsLog(e) = parse(&["effects-log", "-t", "tcp", "-c", "0", "-H"]) else {
        panic!("not effects-log")
    };
    assert_eq!((e.csi, e.human_readable), (Some(0), true));
    let Command::Compare(c) = parse(&[
        "compare",
        "-t",
        "tcp",
        "--start-block",
        "8",
        "-c",
        "7",
        "-d",
        "/tmp/x",
        "-z",
        "4096",
    ]) else {
        panic!("not compare")
    };
    assert_eq!(
        (c.start_block, c.block_count, c.data_size, c.nsid),
        (8, Some(7), Some(4096), 1)
    );
    assert_eq!(c.data.as_deref(), Some(std::path::Path::new("/tmp/x")));
    let Command::NsDescs(n) = parse(&["ns-descs", "-t", "tcp", "--nsid", "2", "-o", "json"]) else {
        panic!("not ns-descs")
    };
    assert_eq!(n.nsid, 2);
    // nvme-cli's -s is the port here: a start block needs its long name.
    assert!(Cli::try_parse_from(["nvmf-initiator", "compare", "-t", "tcp", "-c", "x"]).is_err());
}

#[test]
fn c_hex_and_si_like_printf() {
    assert_eq!(c_hex(0), "0");
    assert_eq!(c_hex(0x285), "0x285");
    assert_eq!(si_string(0, 512_000.0), "0.00 B");
    assert_eq!(si_string(1, 512_000.0), "512.00 kB");
    assert_eq!(si_string(2_000, 512_000.0), "1.02 GB");
}

fn smart_page() -> Vec<u8> {
    let mut page = vec![0u8; SMART_LOG_LEN];
    let mut s = SmartLog::new_unchecked(&mut page[..]);
    s.set_critical_warning(0x02);
    s.set_temperature(300);
    s.set_avail_spare(100);
    s.set_spare_thresh(10);
    s.set_percent_used(3);
    s.set_data_units_read(2_000);
    s.set_data_units_written(1);
    s.set_host_reads(41);
    s.set_host_writes(42);
    s.set_power_on_hours(7);
    s.set_temp_sensor(1, 310);
    s.set_thm_temp2_total_time(9);
    page
}

#[test]
fn smart_log_plain_like_nvme_cli() {
    let page = smart_page();
    let out = format_smart(&page, u32::MAX, "nqn.x:y", false).unwrap_or_default();
    let expected = "Smart Log for NVME device:nqn.x:y namespace-id:ffffffff\n\
        critical_warning\t\t\t: 0x2\n\
        temperature\t\t\t\t: 27 °C (300 K, 80 °F)\n\
        available_spare\t\t\t\t: 100%\n\
        available_spare_threshold\t\t: 10%\n\
        percentage_used\t\t\t\t: 3%\n\
        endurance group critical warning summary: 0\n\
        Data Units Read\t\t\t\t: 2000 (1.02 GB)\n\
        Data Units Written\t\t\t: 1 (512.00 kB)\n\
        host_read_commands\t\t\t: 41\n\
        host_write_commands\t\t\t: 42\n\
        controller_busy_time\t\t\t: 0\n\
        power_cycles\t\t\t\t: 0\n\
        power_on_hours\t\t\t\t: 7\n\
        unsafe_shutdowns\t\t\t: 0\n\
        media_errors\t\t\t\t: 0\n\
        num_err_log_entries\t\t\t: 0\n\
        Warning Temperature Time\t\t: 0\n\
        Critical Composite Temperature Time\t: 0\n\
        Temperature Sensor 2\t\t\t: 37 °C (310 K, 98 °F)\n\
        Thermal Management T1 Trans Count\t: 0\n\
        Thermal Management T2 Trans Count\t: 0\n\
        Thermal Management T1 Total Time\t: 0\n\
        Thermal Management T2 Total Time\t: 9\n";
    assert_eq!(out, expected);
    let human = format_smart(&page, 1, "d", true).unwrap_or_default();
    assert!(human.contains(
        "critical_warning\t\t\t: 0x2\n      Available Spare[0]             : 0\n      \
         Temp. Threshold[1]             : 1\n"
    ));
    assert!(human.contains("      Persistent Mem. RO[5]          : 0\ntemperature"));
    assert!(format_smart(&page[..100], 1, "d", false).is_none());
}

#[test]
fn smart_log_json_keys_and_order_like_nvme_cli() {
    let v = smart_json(&smart_page(), false).unwrap_or_default();
    let keys: Vec<&str> = v
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        [
            "critical_warning",
            "temperature",
            "avail_spare",
            "spare_thresh",
            "percent_used",
            "endurance_grp_critical_warning_summary",
            "data_units_read",
            "data_units_written",
            "host_read_commands",
            "host_write_commands",
            "controller_busy_time",
            "power_cycles",
            "power_on_hours",
            "unsafe_shutdowns",
            "media_errors",
            "num_err_log_entries",
            "warning_temp_time",
            "critical_comp_time",
            "temperature_sensor_2",
            "thm_temp1_trans_count",
            "thm_temp2_trans_count",
            "thm_temp1_total_time",
            "thm_temp2_total_time",
        ]
    );
    assert_eq!(v["temperature"], 300);
    assert_eq!(v["data_units_read"], 2000);
    assert_eq!(v["critical_warning"], 2);
    let h = smart_json(&smart_page(), true).unwrap_or_default();
    assert_eq!(
        h["critical_warning"],
        json!({"value": 2, "available_spare": 0, "temp_threshold": 1,
               "reliability_degraded": 0, "ro": 0, "vmbu_failed": 0, "pmr_ro": 0})
    );
}

#[test]
fn error_log_like_nvme_cli() {
    let mut page = vec![0u8; 2 * ERROR_INFO_ENTRY_LEN];
    {
        let mut e = ErrorInfoEntry::new_unchecked(&mut page[..ERROR_INFO_ENTRY_LEN]);
        e.set_error_count(5);
        e.set_sqid(1);
        e.set_cmdid(0x1f);
        e.set_status(Status::generic_dnr(generic::INVALID_FIELD).at(44, 0), false);
        e.set_nsid(1);
        e.set_lba(0x10);
        e.set_trtype(trtype::TCP);
        e.set_opcode(io::READ);
    }
    let out = format_error_log(&page, 2, "nqn.x:y");
    let first = "Error Log Entries for device:nqn.x:y entries:2\n\
        .................\n \
        Entry[ 0]\n\
        .................\n\
        error_count\t: 5\n\
        sqid\t\t: 1\n\
        cmdid\t\t: 0x1f\n\
        status_field\t: 0x4002 (Invalid Field in Command)\n\
        phase_tag\t: 0\n\
        parm_err_loc\t: 0x2c\n\
        lba\t\t: 0x10\n\
        nsid\t\t: 0x1\n\
        vs\t\t: 0\n\
        trtype\t\t: 0x3 (TCP Transport error)\n\
        csi\t\t: 0\n\
        opcode\t\t: 0x2\n\
        cs\t\t: 0\n\
        trtype_spec_info: 0\n\
        log_page_version: 0\n\
        .................\n \
        Entry[ 1]\n";
    assert!(out.starts_with(first), "{out}");
    assert!(out.contains("status_field\t: 0 (Success)\n"));
    let v = error_log_json(&page, 1);
    assert_eq!(
        v,
        json!({"errors": [{"error_count": 5, "sqid": 1, "cmdid": 31, "status_field": 0x4002,
            "phase_tag": 0, "parm_error_location": 0x2c, "lba": 16, "nsid": 1, "vs": 0,
            "trtype": 3, "cs": 0, "trtype_spec_info": 0}]})
    );
}

#[test]
fn fw_log_like_nvme_cli() {
    let mut page = vec![0u8; FW_SLOT_LOG_LEN];
    {
        let mut f = FwSlotLog::new_unchecked(&mut page[..]);
        f.set_afi(fw_afi(1, 0));
        f.set_frs(1, "0.1.0");
    }
    let out = format_fw_log(&page, "nqn.x:y").unwrap_or_default();
    // "0.1.0   " read as a little-endian u64.
    assert_eq!(
        out,
        "Firmware Log for device:nqn.x:y\nafi  : 0x1\nfrs1 : 0x202020302e312e30 (0.1.0...)\n"
    );
    assert_eq!(
        fw_log_json(&page, "nqn.x:y").unwrap_or_default(),
        json!({"nqn.x:y": {"Active Firmware Slot (afi)": 1,
            "Firmware Rev Slot 1": "2314885599773929008 (0.1.0...)"}})
    );
}

#[test]
fn changed_ns_list_like_nvme_cli() {
    let mut page = vec![0u8; CHANGED_NS_LIST_LEN];
    assert_eq!(format_changed_ns(&page), "no ns changed\n");
    write_changed_ns_list(&mut page, &[1, 0x20]);
    assert_eq!(
        format_changed_ns(&page),
        "[   0]:0x1\n[   1]:0x20\nno ns changed\n"
    );
    assert_eq!(
        changed_ns_json(&page, "d"),
        Some(json!({"Changed Attached Namespace List Log": "d",
            "d": {"[   1]": "0x1", "[   2]": "0x20"}}))
    );
    let many: Vec<u32> = (1..=2000).collect();
    write_changed_ns_list(&mut page, &many);
    assert_eq!(format_changed_ns(&page), "more than 1024 ns changed\n");
    assert_eq!(changed_ns_json(&page, "d"), None);
}

fn effects_page() -> Vec<u8> {
    let mut page = vec![0u8; CMD_EFFECTS_LOG_LEN];
    {
        let mut l = CmdEffectsLog::new_unchecked(&mut page[..]);
        l.set_acs(0x06, effects::CSUPP);
        l.set_iocs(io::WRITE, effects::CSUPP | effects::LBCC);
        l.set_iocs(io::COMPARE, effects::CSUPP);
    }
    page
}

#[test]
fn effects_log_like_nvme_cli() {
    let page = effects_page();
    let out = format_effects(&page, csi::NVM, false).unwrap_or_default();
    let expected = format!(
        "NVM Command Set Log Page\n{}\n\
         Admin Commands\n\
         ACS6     [Identify                        ] 00000001\n\
         \n\
         I/O Commands\n\
         IOCS1    [Write                           ] 00000003\n\
         IOCS5    [Compare                         ] 00000001\n\
         \n",
        "-".repeat(80)
    );
    assert_eq!(out, expected);
    let human = format_effects(&page, csi::NVM, true).unwrap_or_default();
    assert!(human.contains(
        "IOCS1    [Write                           ] 00000003  CSUPP+  LBCC+  NCC-  NIC-  \
         CCC-  USS-  No CSER defined\n  No command restriction\n"
    ));
    assert_eq!(
        effects_json(&page, csi::NVM),
        Some(json!({"command_set_identifier": 0,
            "admin_cmd_set": {"ACS_6 (Identify)": 1},
            "io_cmd_set": {"IOCS_1 (Write)": 3, "IOCS_5 (Compare)": 1}}))
    );
    assert_eq!(effects_command_sets(cap_css::NVM), vec![csi::NVM]);
    assert_eq!(
        effects_command_sets(cap_css::NVM | cap_css::CSI),
        vec![csi::NVM, csi::ZNS]
    );
}

#[test]
fn ns_descs_like_nvme_cli() {
    let mut page = vec![0u8; IDENTIFY_LEN];
    let uuid = [
        0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0x4d, 0xef, 0x81, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd,
        0xef,
    ];
    write_ns_id_descriptors(
        &mut page,
        &[
            NsIdDescriptor::Eui64([1, 2, 3, 4, 5, 6, 7, 8]),
            NsIdDescriptor::Uuid(uuid),
            NsIdDescriptor::Nguid([0xAB; 16]),
            NsIdDescriptor::Csi(0),
        ],
    );
    assert_eq!(
        format_ns_descs(&page, 1, false),
        "NVME Namespace Identification Descriptors NS 1:\n\
         eui64   : 0102030405060708\n\
         uuid    : 12345678-9abc-4def-8123-456789abcdef\n\
         nguid   : abababababababababababababababab\n\
         csi     : 0\n"
    );
    let v = format_ns_descs(&page, 1, true);
    assert!(v.contains("loc     : 12\nnidt    : 3\nnidl    : 16\ntype    : uuid\nuuid    : "));
    let j = ns_descs_json(&page);
    assert_eq!(
        j["ns-descs"][1],
        json!({"loc": 12, "nidt": 3, "nidl": 16, "Type": "uuid",
            "uuid": "12345678-9abc-4def-8123-456789abcdef"})
    );
    assert_eq!(j["ns-descs"][3]["csi"], "0");
    assert_eq!(ns_descs_json(&[0u8; 16]), json!({}));
}

#[test]
fn compare_extent_like_nvme_cli_submit_io() {
    // -c 7 with 512-byte blocks: 8 blocks.
    assert_eq!(compare_extent(Some(7), None, 512).ok(), Some((4096, 7)));
    // -z 4096 alone: the block count follows from the size (rounded up).
    assert_eq!(compare_extent(None, Some(4096), 512).ok(), Some((4096, 7)));
    assert_eq!(compare_extent(None, Some(4097), 512).ok(), Some((4608, 8)));
    // A size smaller than the blocks asked for is rounded up to them.
    assert_eq!(
        compare_extent(Some(3), Some(100), 512).ok(),
        Some((2048, 3))
    );
    assert!(compare_extent(None, None, 512).is_err());
    assert!(compare_extent(None, Some(0), 512).is_err());
    assert!(compare_extent(None, Some(65537 * 512), 512).is_err());
}

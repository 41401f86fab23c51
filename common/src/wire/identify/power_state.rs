//! The 32-byte power state descriptor of Identify Controller (Linux
//! `struct nvme_id_power_state`): the [`PowerStateDesc`] view and its flags.

use crate::wire::{getters, setters, view};

use super::POWER_STATE_LEN;

mod psd_field {
    use core::ops::Range;
    pub const MAX_POWER: Range<usize> = 0..2;
    pub const FLAGS: Range<usize> = 3..4;
    pub const ENTRY_LAT: Range<usize> = 4..8;
    pub const EXIT_LAT: Range<usize> = 8..12;
    pub const READ_TPUT: Range<usize> = 12..13;
    pub const READ_LAT: Range<usize> = 13..14;
    pub const WRITE_TPUT: Range<usize> = 14..15;
    pub const WRITE_LAT: Range<usize> = 15..16;
    pub const IDLE_POWER: Range<usize> = 16..18;
    pub const IDLE_SCALE: Range<usize> = 18..19;
    pub const ACTIVE_POWER: Range<usize> = 20..22;
    pub const ACTIVE_WORK_SCALE: Range<usize> = 22..23;
}

/// Power state descriptor flags (Linux `NVME_PS_FLAGS_*`).
pub mod ps_flags {
    pub const MAX_POWER_SCALE: u8 = 1 << 0;
    pub const NON_OP_STATE: u8 = 1 << 1;
}

view!(
    /// A view of one 32-byte power state descriptor (Linux `struct nvme_id_power_state`).
    PowerStateDesc,
    POWER_STATE_LEN
);

impl<T: AsRef<[u8]>> PowerStateDesc<T> {
    getters! {
        /// Maximum power, centiwatts (or 0.0001 W with MAX_POWER_SCALE).
        max_power: u16 = psd_field::MAX_POWER,
        flags: u8 = psd_field::FLAGS,
        /// Entry latency, microseconds.
        entry_lat: u32 = psd_field::ENTRY_LAT,
        /// Exit latency, microseconds.
        exit_lat: u32 = psd_field::EXIT_LAT,
        read_tput: u8 = psd_field::READ_TPUT,
        read_lat: u8 = psd_field::READ_LAT,
        write_tput: u8 = psd_field::WRITE_TPUT,
        write_lat: u8 = psd_field::WRITE_LAT,
        idle_power: u16 = psd_field::IDLE_POWER,
        idle_scale: u8 = psd_field::IDLE_SCALE,
        active_power: u16 = psd_field::ACTIVE_POWER,
        active_work_scale: u8 = psd_field::ACTIVE_WORK_SCALE,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PowerStateDesc<T> {
    setters! {
        set_max_power: u16 = psd_field::MAX_POWER,
        set_flags: u8 = psd_field::FLAGS,
        set_entry_lat: u32 = psd_field::ENTRY_LAT,
        set_exit_lat: u32 = psd_field::EXIT_LAT,
        set_read_tput: u8 = psd_field::READ_TPUT,
        set_read_lat: u8 = psd_field::READ_LAT,
        set_write_tput: u8 = psd_field::WRITE_TPUT,
        set_write_lat: u8 = psd_field::WRITE_LAT,
        set_idle_power: u16 = psd_field::IDLE_POWER,
        set_idle_scale: u8 = psd_field::IDLE_SCALE,
        set_active_power: u16 = psd_field::ACTIVE_POWER,
        set_active_work_scale: u8 = psd_field::ACTIVE_WORK_SCALE,
    }
}

//! Wire formats: zero-copy views (`Foo<T: AsRef<[u8]>>`) with one accessor per spec
//! field, and named constants. Little-endian everywhere. Offsets follow the NVMe Base
//! and NVMe over Fabrics specifications and Linux `include/linux/nvme.h`.

pub mod status;

//! Wire formats: zero-copy views (`Foo<T: AsRef<[u8]>>`) with one accessor per spec
//! field, and named constants. Little-endian everywhere. Offsets follow the NVMe Base
//! and NVMe over Fabrics specifications and Linux `include/linux/nvme.h`.
//!
//! Every view follows the same pattern (after smoltcp's `src/wire/`):
//! `new_unchecked(buffer)`, `new_checked(buffer) -> Result<Self, WireError>`,
//! `check_len()`, `into_inner()`, `as_bytes()`, one getter per field and `set_*`
//! setters when the buffer is mutable. Getters never panic: on a buffer too short
//! for a field they return 0 (or an empty slice); setters on a short buffer do nothing.

#![forbid(unsafe_code)]

use core::ops::Range;

pub mod admin;
pub mod ana;
pub mod auth;
pub mod cqe;
pub mod fabrics;
pub mod identify;
pub mod log;
pub mod nvm;
pub mod rdma;
pub mod resv;
pub mod sgl;
pub mod sqe;
pub mod status;
pub mod supported;
pub mod tcp;

/// Errors from checking or parsing a wire structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("invalid: {0}")]
    Invalid(&'static str),
}

/// Returns `Err(Truncated)` unless `buf` holds at least `need` bytes.
#[inline]
pub(crate) fn check_len(buf: &[u8], need: usize) -> Result<(), WireError> {
    if buf.len() < need {
        Err(WireError::Truncated {
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

#[inline]
pub(crate) fn get_u8(buf: &[u8], at: usize) -> u8 {
    buf.get(at).copied().unwrap_or(0)
}

#[inline]
pub(crate) fn set_u8(buf: &mut [u8], at: usize, v: u8) {
    if let Some(b) = buf.get_mut(at) {
        *b = v;
    }
}

#[inline]
fn get_array<const N: usize>(buf: &[u8], r: Range<usize>) -> [u8; N] {
    buf.get(r)
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .unwrap_or([0; N])
}

#[inline]
pub(crate) fn get_u16(buf: &[u8], r: Range<usize>) -> u16 {
    u16::from_le_bytes(get_array(buf, r))
}

#[inline]
pub(crate) fn get_u32(buf: &[u8], r: Range<usize>) -> u32 {
    u32::from_le_bytes(get_array(buf, r))
}

#[inline]
pub(crate) fn get_u64(buf: &[u8], r: Range<usize>) -> u64 {
    u64::from_le_bytes(get_array(buf, r))
}

#[inline]
pub(crate) fn get_u128(buf: &[u8], r: Range<usize>) -> u128 {
    u128::from_le_bytes(get_array(buf, r))
}

/// Reads a little-endian 24-bit value.
#[inline]
pub(crate) fn get_u24(buf: &[u8], r: Range<usize>) -> u32 {
    let b: [u8; 3] = get_array(buf, r);
    u32::from_le_bytes([b[0], b[1], b[2], 0])
}

/// Copies `src` into `buf[r]` when both have exactly the same length; otherwise no-op.
#[inline]
fn put(buf: &mut [u8], r: Range<usize>, src: &[u8]) {
    if let Some(dst) = buf.get_mut(r) {
        if dst.len() == src.len() {
            dst.copy_from_slice(src);
        }
    }
}

#[inline]
pub(crate) fn set_u16(buf: &mut [u8], r: Range<usize>, v: u16) {
    put(buf, r, &v.to_le_bytes());
}

#[inline]
pub(crate) fn set_u32(buf: &mut [u8], r: Range<usize>, v: u32) {
    put(buf, r, &v.to_le_bytes());
}

#[inline]
pub(crate) fn set_u64(buf: &mut [u8], r: Range<usize>, v: u64) {
    put(buf, r, &v.to_le_bytes());
}

#[inline]
pub(crate) fn set_u128(buf: &mut [u8], r: Range<usize>, v: u128) {
    put(buf, r, &v.to_le_bytes());
}

/// Writes the low 24 bits of `v` little-endian.
#[inline]
pub(crate) fn set_u24(buf: &mut [u8], r: Range<usize>, v: u32) {
    let b = v.to_le_bytes();
    put(buf, r, &b[..3]);
}

/// The bytes of `buf[r]`, or an empty slice when the buffer is short.
#[inline]
pub(crate) fn get_bytes(buf: &[u8], r: Range<usize>) -> &[u8] {
    buf.get(r).unwrap_or(&[])
}

/// The bytes of `buf[r]` as a fixed array (zeros when the buffer is short).
#[inline]
pub(crate) fn get_bytes_n<const N: usize>(buf: &[u8], r: Range<usize>) -> [u8; N] {
    get_array(buf, r)
}

/// Mutable bytes of `buf[r]`, or an empty slice when the buffer is short.
#[inline]
pub(crate) fn get_bytes_mut(buf: &mut [u8], r: Range<usize>) -> &mut [u8] {
    match buf.get_mut(r) {
        Some(s) => s,
        None => &mut [],
    }
}

/// Copies `src` into `buf[r]`, truncating `src` to the field and filling the rest
/// with `pad`. No-op when the buffer is short.
#[inline]
pub(crate) fn set_padded(buf: &mut [u8], r: Range<usize>, src: &[u8], pad: u8) {
    if let Some(dst) = buf.get_mut(r) {
        let n = src.len().min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
        dst[n..].fill(pad);
    }
}

/// A fixed-width ASCII field as a string: stops at the first NUL, trims trailing
/// spaces (and leading/trailing whitespace), replaces non-UTF-8 bytes.
pub fn field_to_string(field: &[u8]) -> String {
    trim_field(field)
        .iter()
        .map(|&b| if b.is_ascii() { b as char } else { '?' })
        .collect()
}

/// A fixed-width ASCII field without trailing NUL/space padding.
pub fn trim_field(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    let s = &field[..end];
    let end = s.iter().rposition(|&b| b != b' ').map_or(0, |p| p + 1);
    &s[..end]
}

/// Defines the shared boilerplate of a zero-copy view of `$len` bytes.
macro_rules! view {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// The length of the structure on the wire.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer after checking it holds the whole structure.
            pub fn new_checked(buffer: T) -> Result<Self, $crate::wire::WireError> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// `Err(Truncated)` unless the buffer holds the whole structure.
            pub fn check_len(&self) -> Result<(), $crate::wire::WireError> {
                $crate::wire::check_len(self.buffer.as_ref(), $len)
            }

            /// Unwraps the buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The whole underlying buffer.
            pub fn as_bytes(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// The whole underlying buffer, mutably.
            pub fn as_bytes_mut(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}
pub(crate) use view;

/// Defines `fn $get(&self) -> $ty` / `fn $set(&mut self, v: $ty)` pairs for
/// little-endian integer fields. Used inside `impl` blocks split by mutability:
/// `getters!{ name: u16 = field::NAME, ... }` and `setters!{ set_name: u16 = field::NAME }`.
macro_rules! getters {
    ($( $(#[$m:meta])* $get:ident : $ty:ident = $r:expr ),* $(,)?) => {
        $(
            $(#[$m])*
            #[inline]
            pub fn $get(&self) -> $ty {
                $crate::wire::getters!(@get $ty, self.buffer.as_ref(), $r)
            }
        )*
    };
    (@get u8, $b:expr, $r:expr) => { $crate::wire::get_u8($b, $r.start) };
    (@get u16, $b:expr, $r:expr) => { $crate::wire::get_u16($b, $r) };
    (@get u32, $b:expr, $r:expr) => { $crate::wire::get_u32($b, $r) };
    (@get u64, $b:expr, $r:expr) => { $crate::wire::get_u64($b, $r) };
    (@get u128, $b:expr, $r:expr) => { $crate::wire::get_u128($b, $r) };
}
pub(crate) use getters;

macro_rules! setters {
    ($( $(#[$m:meta])* $set:ident : $ty:ident = $r:expr ),* $(,)?) => {
        $(
            $(#[$m])*
            #[inline]
            pub fn $set(&mut self, v: $ty) {
                $crate::wire::setters!(@set $ty, self.buffer.as_mut(), $r, v)
            }
        )*
    };
    (@set u8, $b:expr, $r:expr, $v:expr) => { $crate::wire::set_u8($b, $r.start, $v) };
    (@set u16, $b:expr, $r:expr, $v:expr) => { $crate::wire::set_u16($b, $r, $v) };
    (@set u32, $b:expr, $r:expr, $v:expr) => { $crate::wire::set_u32($b, $r, $v) };
    (@set u64, $b:expr, $r:expr, $v:expr) => { $crate::wire::set_u64($b, $r, $v) };
    (@set u128, $b:expr, $r:expr, $v:expr) => { $crate::wire::set_u128($b, $r, $v) };
}
pub(crate) use setters;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_never_panic_on_short_buffers() {
        let mut b = [1u8, 2, 3];
        assert_eq!(get_u32(&b, 0..4), 0);
        assert_eq!(get_u16(&b, 1..3), 0x0302);
        assert_eq!(get_u24(&b, 0..3), 0x030201);
        set_u64(&mut b, 0..8, 7);
        assert_eq!(b, [1, 2, 3]);
        assert_eq!(get_bytes(&b, 2..10), &[] as &[u8]);
        set_padded(&mut b, 0..3, b"abcdef", b' ');
        assert_eq!(&b, b"abc");
        set_padded(&mut b, 0..3, b"a", 0);
        assert_eq!(b, [b'a', 0, 0]);
    }

    #[test]
    fn trims_fields() {
        assert_eq!(field_to_string(b"abc   "), "abc");
        assert_eq!(field_to_string(b"abc\0\0x"), "abc");
        assert_eq!(field_to_string(b"    "), "");
        assert_eq!(trim_field(b"4420\0\0"), b"4420");
    }
}

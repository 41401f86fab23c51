//! Reading a fuzz input a few bytes at a time, for harnesses that take their
//! decisions from it step by step (`tcp_transfer`, `tcp_pair`).

/// Reads the input one byte at a time (0 once it is used up).
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    pub fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    /// Every byte was read.
    pub fn done(&self) -> bool {
        self.0.is_empty()
    }
}

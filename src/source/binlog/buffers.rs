//! The growable buffers a column of a row image decodes into: variable-length values as
//! Arrow's offsets and data, and a validity that exists only once a NULL was pushed.
//!
//! # Invariant
//! A buffer of `n` values has `n + 1` offsets (the first 0, never decreasing, the last the
//! data's length) and a validity of length `n`; every operation here keeps that, so a buffer
//! cut, split or appended to is still what pushing its values one by one would have made.

use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};

use super::cursor::{Cursor, RowsError};

/// Variable-length values: Arrow's offsets and data.
#[derive(Debug, Clone)]
pub(super) struct Bytes {
    pub(super) offsets: Vec<i32>,
    pub(super) data: Vec<u8>,
}

impl Bytes {
    pub(super) fn new() -> Self {
        Self {
            offsets: vec![0],
            data: Vec::new(),
        }
    }

    /// Ends the value whose bytes were just appended to `data`.
    #[inline]
    pub(super) fn end_value(&mut self) -> Result<(), RowsError> {
        let end = i32::try_from(self.data.len()).map_err(|_| {
            RowsError::Value(format!(
                "more than {} bytes of values in one batch",
                i32::MAX
            ))
        })?;
        self.offsets.push(end);
        Ok(())
    }

    #[inline]
    pub(super) fn push(&mut self, v: &[u8]) -> Result<(), RowsError> {
        self.data.extend_from_slice(v);
        self.end_value()
    }

    /// Pushes the next `len` bytes of `cur` as a value. A short value is copied as a whole
    /// window of the image (16 or 32 bytes, of which only `len` are kept) when the image
    /// holds that many more bytes: a move of known size instead of a call to `memmove`,
    /// which a profile of the live decoder showed as a tenth of its thread.
    #[inline]
    pub(super) fn push_from(&mut self, cur: &mut Cursor<'_>, len: usize) -> Result<(), RowsError> {
        if len <= 16 {
            if let Some(window) = cur.window::<16>() {
                return self.push_window(cur, window, len);
            }
        } else if len <= 32 {
            if let Some(window) = cur.window::<32>() {
                return self.push_window(cur, window, len);
            }
        }
        self.push(cur.take(len)?)
    }

    #[inline]
    fn push_window<const N: usize>(
        &mut self,
        cur: &mut Cursor<'_>,
        window: &[u8; N],
        len: usize,
    ) -> Result<(), RowsError> {
        let at = self.data.len();
        self.data.extend_from_slice(window);
        self.data.truncate(at + len);
        cur.skip(len);
        self.end_value()
    }

    #[inline]
    pub(super) fn push_empty(&mut self) {
        let last = self.offsets.last().copied().unwrap_or(0);
        self.offsets.push(last);
    }

    /// Room for `rows` more values: their offsets, and as many bytes as values have taken
    /// on average so far, at most `bytes` (plus a window's slack, see [`Bytes::push_from`]),
    /// so that a rows event's text does not grow the buffer value by value. `bytes` bounds
    /// what a few large values earlier in the batch would otherwise make it reserve.
    pub(super) fn reserve(&mut self, rows: usize, bytes: usize) {
        self.offsets.reserve(rows);
        let values = self.offsets.len().saturating_sub(1);
        if let Some(average) = self.data.len().checked_div(values) {
            self.data
                .reserve(average.saturating_mul(rows).min(bytes).saturating_add(32));
        }
    }

    /// Whether `other`'s values fit after these under 32-bit offsets.
    pub(super) fn fits(&self, other: &Bytes) -> bool {
        self.data.len() + other.data.len() <= i32::MAX as usize
    }

    /// Whether `more` bytes of values fit after these under 32-bit offsets.
    pub(super) fn has_room(&self, more: usize) -> bool {
        self.data.len() + more <= i32::MAX as usize
    }

    /// Keeps the first `len` values.
    pub(super) fn truncate(&mut self, len: usize) {
        if let Some(&end) = self.offsets.get(len) {
            self.offsets.truncate(len + 1);
            self.data.truncate(end as usize);
        }
    }

    /// Drops the first `n` values.
    pub(super) fn drain_front(&mut self, n: usize) {
        let Some(&start) = self.offsets.get(n) else {
            return;
        };
        self.offsets.drain(..n);
        self.offsets.iter_mut().for_each(|o| *o -= start);
        self.data.drain(..start as usize);
    }

    /// Moves `other`'s values after these (the caller checked [`Bytes::fits`]); `other` is
    /// left empty, its capacity kept.
    pub(super) fn append(&mut self, other: &mut Bytes) {
        let base = self.data.len() as i32;
        self.data.extend_from_slice(&other.data);
        self.offsets
            .extend(other.offsets.iter().skip(1).map(|&end| end + base));
        other.data.clear();
        other.offsets.truncate(1);
    }

    pub(super) fn offsets(&mut self) -> OffsetBuffer<i32> {
        // Offsets start at 0 and only ever repeat or grow with `data`.
        OffsetBuffer::new(ScalarBuffer::from(std::mem::take(&mut self.offsets)))
    }
}

/// A column's validity, materialised only at its first NULL: until then every value is valid
/// and only the count is kept.
#[derive(Debug, Clone, Default)]
pub(super) struct Validity {
    /// One bit per value, least significant first, once a NULL was pushed.
    pub(super) bits: Option<Vec<u8>>,
    pub(super) len: usize,
}

impl Validity {
    /// Moves `other`'s validity after this one's, leaving `other` empty.
    pub(super) fn append(&mut self, other: &mut Validity) {
        match (other.bits.take(), self.bits.is_some()) {
            (None, false) => self.len += other.len,
            (None, true) => (0..other.len).for_each(|_| self.push(true)),
            (Some(bits), _) => {
                (0..other.len).for_each(|i| self.push(bits[i / 8] & (1 << (i % 8)) != 0))
            }
        }
        other.len = 0;
    }

    /// Keeps the first `len` values' validity; the bits past them are cleared, as `push`
    /// expects of the last byte.
    pub(super) fn truncate(&mut self, len: usize) {
        if let Some(bits) = &mut self.bits {
            bits.truncate(len.div_ceil(8));
            if let (Some(last), 1..) = (bits.last_mut(), len % 8) {
                *last &= ((1u16 << (len % 8)) - 1) as u8;
            }
        }
        self.len = self.len.min(len);
    }

    /// Drops the first `n` values' validity.
    pub(super) fn drain_front(&mut self, n: usize) {
        let n = n.min(self.len);
        match self.bits.take() {
            None => self.len -= n,
            Some(bits) => {
                let len = std::mem::take(&mut self.len);
                for i in n..len {
                    self.push(bits[i / 8] & (1 << (i % 8)) != 0);
                }
            }
        }
    }

    /// Whether value `i` is valid (not NULL).
    pub(super) fn is_valid(&self, i: usize) -> bool {
        self.bits
            .as_ref()
            .is_none_or(|bits| bits.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0))
    }

    #[inline]
    pub(super) fn push(&mut self, valid: bool) {
        if let Some(bits) = &mut self.bits {
            if self.len.is_multiple_of(8) {
                bits.push(0);
            }
            if valid {
                if let Some(last) = bits.last_mut() {
                    *last |= 1 << (self.len % 8);
                }
            }
        } else if !valid {
            self.materialise();
        }
        self.len += 1;
    }

    /// Writes the bits of the values so far (all valid) and a cleared bit for the NULL that
    /// `push` is adding.
    #[cold]
    pub(super) fn materialise(&mut self) {
        let mut bits = vec![0xffu8; self.len / 8];
        bits.push(((1u16 << (self.len % 8)) - 1) as u8);
        self.bits = Some(bits);
    }

    pub(super) fn finish(&mut self) -> Option<NullBuffer> {
        let bits = self.bits.take()?;
        Some(NullBuffer::new(BooleanBuffer::new(
            Buffer::from_vec(bits),
            0,
            self.len,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values pushed from an image through its windows make the same buffer as values pushed
    /// one slice at a time, whether or not the image has a window's slack after each value.
    #[test]
    fn values_copied_through_windows_are_the_values() {
        let lengths = [0usize, 1, 13, 16, 17, 31, 32, 33, 200];
        let values: Vec<Vec<u8>> = lengths
            .iter()
            .map(|&n| (0..n).map(|i| (i * 7 + n) as u8).collect())
            .collect();
        // Every value at the image's end once: no window fits after it there.
        for last in 0..values.len() {
            let order: Vec<&Vec<u8>> = values
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != last)
                .map(|(_, v)| v)
                .chain([&values[last]])
                .collect();
            let image: Vec<u8> = order.iter().flat_map(|v| v.iter().copied()).collect();
            let (mut windowed, mut plain) = (Bytes::new(), Bytes::new());
            let mut cur = Cursor::new(&image);
            for v in &order {
                windowed.reserve(1, v.len());
                windowed.push_from(&mut cur, v.len()).unwrap();
                plain.push(v).unwrap();
            }
            assert!(cur.at_end());
            assert_eq!(windowed.offsets, plain.offsets);
            assert_eq!(windowed.data, plain.data);
        }
        // A value longer than the image is an error, not a read past its end.
        let mut cur = Cursor::new(&[1, 2, 3]);
        assert!(Bytes::new().push_from(&mut cur, 4).is_err());
    }
}

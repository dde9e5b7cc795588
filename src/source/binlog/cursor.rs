//! The bottom of the row decoder: a bounds-checked cursor over row-image bytes, and the error
//! every decoding step returns.
//!
//! # Invariant
//! Reading past the end of an image is an error naming the offset, never a panic: a truncated
//! or corrupt event becomes a definite decoding error of its table.

use mysql_common::io::ReadMysqlExt;

/// Why a rows event could not be decoded.
#[derive(Debug)]
pub enum RowsError {
    /// The event lacks columns: not a full row image.
    Partial(String),
    /// The bytes do not decode against the table map.
    Value(String),
}

impl From<String> for RowsError {
    fn from(s: String) -> Self {
        RowsError::Value(s)
    }
}

pub(super) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }

    #[inline]
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], RowsError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.data.len())
            .ok_or_else(|| self.truncated(n))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next `N` bytes as an array, for fixed-width values.
    #[inline]
    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N], RowsError> {
        match self
            .data
            .get(self.pos..)
            .and_then(|rest| rest.first_chunk::<N>())
        {
            Some(bytes) => {
                self.pos += N;
                Ok(*bytes)
            }
            None => Err(self.truncated(N)),
        }
    }

    /// The next `N` bytes without reading them, when the image holds that many more.
    #[inline]
    pub(super) fn window<const N: usize>(&self) -> Option<&'a [u8; N]> {
        self.data.get(self.pos..)?.first_chunk::<N>()
    }

    /// Reads `n` bytes the caller already has (from [`Cursor::window`]); `n` is at most
    /// that window's length.
    #[inline]
    pub(super) fn skip(&mut self, n: usize) {
        debug_assert!(self.pos + n <= self.data.len());
        self.pos += n;
    }

    /// Bytes not read yet.
    pub(super) fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    #[cold]
    fn truncated(&self, n: usize) -> RowsError {
        RowsError::Value(format!(
            "row image truncated: need {n} bytes at offset {}, {} left",
            self.pos,
            self.data.len() - self.pos
        ))
    }

    #[inline]
    pub(super) fn uint_le(&mut self, n: usize) -> Result<u64, RowsError> {
        Ok(self
            .take(n)?
            .iter()
            .rev()
            .fold(0u64, |a, b| (a << 8) | *b as u64))
    }

    /// MySQL's packed integer (`net_field_length`, the protocol's length-encoded integer),
    /// read with mysql_common.
    pub(super) fn packed(&mut self) -> Result<u64, RowsError> {
        let mut rest = self.data.get(self.pos..).unwrap_or_default();
        let before = rest.len();
        let value = rest.read_lenenc_int().map_err(|e| {
            RowsError::Value(format!("a packed integer at offset {}: {e}", self.pos))
        })?;
        self.pos += before - rest.len();
        Ok(value)
    }

    #[inline]
    pub(super) fn uint_be(&mut self, n: usize) -> Result<u64, RowsError> {
        Ok(self.take(n)?.iter().fold(0u64, |a, b| (a << 8) | *b as u64))
    }
}

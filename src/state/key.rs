//! [`KeyBytes`]: a row's key in Arrow's row format, as the overlay and the hand-off's delta
//! hold it.
//!
//! # Invariant
//! A `KeyBytes` is its bytes: it hashes, compares, orders and borrows exactly as the `[u8]` it holds,
//! inline or boxed, so a map keyed by it is looked up with a plain slice.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// Bytes held inline: a `BIGINT` key takes 9 in the row format, two `INT` columns 10.
const INLINE: usize = 22;

/// Key bytes, inline up to 22 bytes (`INLINE`). The overlay's nodes are copied on the first
/// change after each published version, every key in the node with them: an inline key is
/// copied as plain bytes, with no allocation and no per-byte loop (a `SmallVec`'s clone went
/// through its iterator, 7% of the capture task).
#[derive(Clone)]
pub struct KeyBytes(Repr);

/// Private, so an inline length is always at most [`INLINE`].
#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<[u8]>),
}

impl KeyBytes {
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Boxed(bytes) => bytes,
        }
    }
}

impl From<&[u8]> for KeyBytes {
    fn from(key: &[u8]) -> Self {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..key.len()].copy_from_slice(key);
                Self(Repr::Inline { len, bytes })
            }
            _ => Self(Repr::Boxed(key.into())),
        }
    }
}

impl Deref for KeyBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for KeyBytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Hash for KeyBytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl PartialEq for KeyBytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for KeyBytes {}

impl Ord for KeyBytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl PartialOrd for KeyBytes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for KeyBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_their_bytes_inline_or_boxed() {
        let hasher = ahash::RandomState::new();
        for len in [0, 1, 9, INLINE - 1, INLINE, INLINE + 1, 300] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let key = KeyBytes::from(bytes.as_slice());
            assert_eq!(matches!(key.0, Repr::Inline { .. }), len <= INLINE, "{len}");
            assert_eq!(&*key, bytes.as_slice());
            assert_eq!(key.clone(), key);
            assert_eq!(hasher.hash_one(&key), hasher.hash_one(bytes.as_slice()));
            let mut map = std::collections::HashMap::new();
            map.insert(key, len);
            assert_eq!(map.get(bytes.as_slice()), Some(&len));
        }
        let a = KeyBytes::from(&[1u8, 2][..]);
        assert_ne!(a, KeyBytes::from(&[1u8, 2, 0][..]));
    }
}

//! Finding the line and column of a key path in YAML text.
//!
//! serde_yaml_ng only reports positions on errors, so to find where `a.b[1].c` is, the
//! text is parsed again by a visitor that walks down the path and raises an error on
//! the target: at the key's scalar for a `.key` step (so the position is that of the
//! key, not of its value), at the element for an `[index]` step. The error carries the
//! parser's position of that event.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::error::Seg;

/// The message of the error raised on the target; nothing else produces it.
const MARKER: &str = "\u{0}nvmf-config-locate-target\u{0}";

/// 1-based (line, column) of the key or element `path` names in `text`, if present.
pub(crate) fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match (Walk { rest: path }).deserialize(de) {
        Ok(()) => None,
        Err(e) => {
            if !e.to_string().contains(MARKER) {
                return None;
            }
            e.location().map(|l| (l.line(), l.column()))
        }
    }
}

/// Like [`locate`], but falls back to the nearest enclosing key or element that exists
/// (a defaulted field has no line of its own, its struct has). The document root does
/// not count: an error at line 1 would only mislead.
pub(crate) fn locate_nearest(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    (1..=path.len())
        .rev()
        .find_map(|n| path.get(..n).and_then(|p| locate(text, p)))
}

struct Walk<'p> {
    rest: &'p [Seg],
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.rest.is_empty() {
            d.deserialize_any(Hit)
        } else {
            d.deserialize_any(self)
        }
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Seg::Key(want), tail)) = self.rest.split_first() else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        while let Some(matched) = map.next_key_seed(KeyMatch {
            want,
            hit: tail.is_empty(),
        })? {
            if matched {
                map.next_value_seed(Walk { rest: tail })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Seg::Index(want), tail)) = self.rest.split_first() else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        let mut i = 0usize;
        loop {
            let more = if i == *want {
                seq.next_element_seed(Walk { rest: tail })?.is_some()
            } else {
                seq.next_element::<IgnoredAny>()?.is_some()
            };
            if !more {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// Deserializes a map key: `true` if it is the wanted key. When it is and it is the
/// last step (`hit`), raises the marker error instead, at the key's position.
struct KeyMatch<'a> {
    want: &'a str,
    hit: bool,
}

impl<'de> DeserializeSeed<'de> for KeyMatch<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeyMatch<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        if v != self.want {
            Ok(false)
        } else if self.hit {
            Err(E::custom(MARKER))
        } else {
            Ok(true)
        }
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
}

/// Raises the marker error on whatever value it meets.
struct Hit;

impl Hit {
    fn hit<T, E: de::Error>() -> Result<T, E> {
        Err(E::custom(MARKER))
    }
}

impl<'de> Visitor<'de> for Hit {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Hit::hit()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Hit::hit()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Hit::hit()
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        Hit::hit()
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        Hit::hit()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Hit::hit()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Hit::hit()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Hit::hit()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Hit::hit()
    }
    fn visit_some<D: Deserializer<'de>>(self, _: D) -> Result<(), D::Error> {
        Hit::hit()
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Hit::hit()
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Hit::hit()
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Hit::hit()
    }
}

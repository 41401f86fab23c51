//! `#[serde(with = ...)]` adapters for the crate's newtypes and a few lenient scalars.
//!
//! Values are checked inside the visitor, so a bad NQN or UUID is reported by the YAML
//! parser at the value's own line and column.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serializer};

use nvmf_common::types::{Cntlid, Nqn, Nsid};

/// An NQN as a YAML string, validated by [`Nqn::new`].
struct NqnDe(Nqn);

impl<'de> Deserialize<'de> for NqnDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = NqnDe;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an NQN string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NqnDe, E> {
                Nqn::new(v)
                    .map(NqnDe)
                    .map_err(|e| E::custom(format_args!("invalid NQN: {e}")))
            }
        }
        d.deserialize_str(V)
    }
}

pub(crate) mod nqn {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &Nqn, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.as_str())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Nqn, D::Error> {
        NqnDe::deserialize(d).map(|n| n.0)
    }
}

pub(crate) mod nqn_list {
    use super::*;
    use serde::ser::SerializeSeq;

    pub(crate) fn serialize<S: Serializer>(v: &[Nqn], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for n in v {
            seq.serialize_element(n.as_str())?;
        }
        seq.end()
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Nqn>, D::Error> {
        Vec::<NqnDe>::deserialize(d).map(|v| v.into_iter().map(|n| n.0).collect())
    }
}

pub(crate) mod nsid {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &Nsid, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(v.0)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Nsid, D::Error> {
        u32::deserialize(d).map(Nsid)
    }
}

pub(crate) mod cntlid {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &Cntlid, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u16(v.0)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Cntlid, D::Error> {
        u16::deserialize(d).map(Cntlid)
    }
}

/// An optional UUID written as a string (`8-4-4-4-12` hex, or any form `uuid` parses).
pub(crate) mod uuid_opt {
    use super::*;
    use uuid::Uuid;

    struct UuidDe(Uuid);

    impl<'de> Deserialize<'de> for UuidDe {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = UuidDe;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a UUID string like 01234567-89ab-cdef-0123-456789abcdef")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<UuidDe, E> {
                    Uuid::parse_str(v)
                        .map(UuidDe)
                        .map_err(|e| E::custom(format_args!("invalid UUID {v:?}: {e}")))
                }
            }
            d.deserialize_str(V)
        }
    }

    pub(crate) fn serialize<S: Serializer>(v: &Option<Uuid>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(u) => s.serialize_str(&u.hyphenated().to_string()),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Uuid>, D::Error> {
        Option::<UuidDe>::deserialize(d).map(|o| o.map(|u| u.0))
    }
}

/// A transport service id: a string, but an unquoted port number (`trsvcid: 4420`) is
/// accepted too.
pub(crate) fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string or a port number")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    d.deserialize_any(V)
}

/// A namespace's Ceph client options: a map of option names to values. Values are
/// strings for librados, but an unquoted number or boolean (`rbd_cache: false`) is
/// taken as its text too.
pub(crate) mod ceph_options {
    use super::*;
    use serde::Serialize;
    use std::collections::BTreeMap;

    struct ValueDe(String);

    impl<'de> Deserialize<'de> for ValueDe {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = ValueDe;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a Ceph option value: a string, number or boolean")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<ValueDe, E> {
                    Ok(ValueDe(v.to_string()))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<ValueDe, E> {
                    Ok(ValueDe(v.to_string()))
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<ValueDe, E> {
                    Ok(ValueDe(v.to_string()))
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<ValueDe, E> {
                    Ok(ValueDe(v.to_string()))
                }
                fn visit_bool<E: de::Error>(self, v: bool) -> Result<ValueDe, E> {
                    Ok(ValueDe(v.to_string()))
                }
            }
            d.deserialize_any(V)
        }
    }

    pub(crate) fn serialize<S: Serializer>(
        v: &BTreeMap<String, String>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, String>, D::Error> {
        BTreeMap::<String, ValueDe>::deserialize(d)
            .map(|m| m.into_iter().map(|(k, v)| (k, v.0)).collect())
    }
}

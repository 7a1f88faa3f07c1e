//! JSON that keeps ±∞ (issue 59 §4). serde_json writes every non-finite number as `null`, so a
//! repetition whose KL or NLL is +∞ would read back as "no value" and vanish from the
//! aggregates and from `compare`. uqbench's JSON files (the stored repetitions, summary.json,
//! `uqbench metrics`) write +∞ and −∞ as the strings `"inf"` and `"-inf"` (how Python and the
//! CSV files spell them) and NaN, "no value", as `null`; [`number`] and the readers of
//! `summary::levels` read all three back.
//!
//! [`to_value`] serialises any `Serialize` type through [`Keep`], a serializer that forwards
//! everything to serde_json's except a non-finite `f32`/`f64`.

use serde::ser::{
    Serialize, SerializeMap, SerializeSeq, SerializeStruct, SerializeStructVariant, SerializeTuple,
    SerializeTupleStruct, SerializeTupleVariant, Serializer,
};
use serde_json::Value;

/// The text of +∞ and −∞ in uqbench's JSON and CSV files.
pub const INF: &str = "inf";
/// See [`INF`].
pub const NEG_INF: &str = "-inf";

/// One number as uqbench's JSON writes it: finite as a number, ±∞ as `"inf"`/`"-inf"`, NaN as
/// `null`.
pub fn number(v: f64) -> Value {
    float(serde_json::value::Serializer, v).expect("a number serialises")
}

/// The number a JSON value stands for in uqbench's files: a number, `null` (NaN), or the
/// strings `"inf"`/`"-inf"`; `None` for anything else.
pub fn read_number(v: &Value) -> Option<f64> {
    match v {
        Value::Null => Some(f64::NAN),
        Value::Number(n) => n.as_f64(),
        Value::String(s) => text_number(s),
        _ => None,
    }
}

/// `"inf"`, `"+inf"`, `"-inf"` (any case, also `infinity`) as ±∞, `"nan"` as NaN.
pub fn text_number(s: &str) -> Option<f64> {
    match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        _ => None,
    }
}

/// `v` as a JSON value with ±∞ kept (see the module's documentation).
pub fn to_value<T: Serialize + ?Sized>(v: &T) -> serde_json::Result<Value> {
    v.serialize(Keep(serde_json::value::Serializer))
}

/// `v` as compact JSON text with ±∞ kept.
pub fn to_string<T: Serialize + ?Sized>(v: &T) -> serde_json::Result<String> {
    serde_json::to_string(&to_value(v)?)
}

/// `v` as indented JSON text with ±∞ kept.
pub fn to_string_pretty<T: Serialize + ?Sized>(v: &T) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&to_value(v)?)
}

/// A serializer that writes a non-finite float as [`INF`]/[`NEG_INF`] (NaN as unit, `null`)
/// and forwards everything else to `S`.
pub struct Keep<S>(pub S);

/// A value serialised through [`Keep`] (what the compound serializers hand to `S`).
struct Kept<'a, T: ?Sized>(&'a T);

impl<T: Serialize + ?Sized> Serialize for Kept<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(Keep(s))
    }
}

fn float<S: Serializer>(s: S, v: f64) -> Result<S::Ok, S::Error> {
    if v.is_nan() {
        s.serialize_unit()
    } else if v == f64::INFINITY {
        s.serialize_str(INF)
    } else if v == f64::NEG_INFINITY {
        s.serialize_str(NEG_INF)
    } else {
        s.serialize_f64(v)
    }
}

/// Forwards a scalar method unchanged.
macro_rules! forward {
    ($($name:ident($t:ty)),* $(,)?) => {
        $(fn $name(self, v: $t) -> Result<S::Ok, S::Error> {
            self.0.$name(v)
        })*
    };
}

impl<S: Serializer> Serializer for Keep<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Keep<S::SerializeSeq>;
    type SerializeTuple = Keep<S::SerializeTuple>;
    type SerializeTupleStruct = Keep<S::SerializeTupleStruct>;
    type SerializeTupleVariant = Keep<S::SerializeTupleVariant>;
    type SerializeMap = Keep<S::SerializeMap>;
    type SerializeStruct = Keep<S::SerializeStruct>;
    type SerializeStructVariant = Keep<S::SerializeStructVariant>;

    forward!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str),
    );

    fn serialize_f32(self, v: f32) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            self.0.serialize_f32(v)
        } else {
            float(self.0, f64::from(v))
        }
    }

    fn serialize_f64(self, v: f64) -> Result<S::Ok, S::Error> {
        float(self.0, v)
    }

    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_none()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&Kept(v))
    }

    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit()
    }

    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_variant(name, index, variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &Kept(v))
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_variant(name, index, variant, &Kept(v))
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(Keep)
    }

    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(Keep)
    }

    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len).map(Keep)
    }

    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        self.0
            .serialize_tuple_variant(name, index, variant, len)
            .map(Keep)
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(Keep)
    }

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(Keep)
    }

    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        self.0
            .serialize_struct_variant(name, index, variant, len)
            .map(Keep)
    }
}

/// The compound serializers whose elements go through [`Kept`]: (trait, element method).
macro_rules! elements {
    ($($tr:ident::$method:ident),* $(,)?) => {
        $(impl<S: $tr> $tr for Keep<S> {
            type Ok = S::Ok;
            type Error = S::Error;

            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), S::Error> {
                self.0.$method(&Kept(v))
            }

            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        })*
    };
}

elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl<S: SerializeMap> SerializeMap for Keep<S> {
    type Ok = S::Ok;
    type Error = S::Error;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), S::Error> {
        self.0.serialize_key(&Kept(k))
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), S::Error> {
        self.0.serialize_value(&Kept(v))
    }

    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

/// Struct-like compound serializers: fields by name, through [`Kept`].
macro_rules! fields {
    ($($tr:ident),* $(,)?) => {
        $(impl<S: $tr> $tr for Keep<S> {
            type Ok = S::Ok;
            type Error = S::Error;

            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                v: &T,
            ) -> Result<(), S::Error> {
                self.0.serialize_field(key, &Kept(v))
            }

            fn skip_field(&mut self, key: &'static str) -> Result<(), S::Error> {
                self.0.skip_field(key)
            }

            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        })*
    };
}

fields!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(serde::Serialize)]
    struct Nested {
        x: Vec<f64>,
        m: BTreeMap<String, Option<f32>>,
        t: (f64, i32),
    }

    #[test]
    fn infinities_are_strings_and_nan_is_null_at_any_depth() {
        let v = Nested {
            x: vec![1.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN],
            m: [("a".into(), Some(f32::INFINITY)), ("b".into(), None)].into(),
            t: (f64::NEG_INFINITY, 3),
        };
        let text = to_string(&v).unwrap();
        assert_eq!(
            text,
            r#"{"m":{"a":"inf","b":null},"t":["-inf",3],"x":[1.5,"inf","-inf",null]}"#
        );
        // serde_json alone loses the difference (what this module exists for).
        assert!(serde_json::to_string(&v)
            .unwrap()
            .contains("[1.5,null,null,null]"));
        let back: Vec<Value> = serde_json::from_str(r#"[1.5,"inf","-inf",null,"x",[]]"#).unwrap();
        let read: Vec<Option<f64>> = back.iter().map(read_number).collect();
        assert_eq!(
            read[..3],
            [Some(1.5), Some(f64::INFINITY), Some(f64::NEG_INFINITY)]
        );
        assert!(read[3].unwrap().is_nan());
        assert_eq!(read[4..], [None, None]);
        assert_eq!(number(f64::NEG_INFINITY), Value::String("-inf".into()));
    }
}

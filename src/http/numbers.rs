//! A tensor's `data` in the Open Inference Protocol's JSON: numbers, flat or in nested lists,
//! deserialized straight into one vector (no JSON tree: an image's 150,528 values parse in a few
//! milliseconds), each finite as an `f32`, the nesting rectangular (a ragged list whose count
//! happened to match the shape was served as if it were the tensor).

use super::protocol::finite;
use serde::Deserialize;

/// Numbers, flat or nested lists, deserialized straight into one vector (no JSON tree: an
/// image's 150,528 values parse in a few milliseconds).
#[derive(Debug, Default)]
pub(super) struct Numbers(pub(super) Vec<f32>);

impl<'de> Deserialize<'de> for Numbers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut nest = Nest::default();
        serde::de::DeserializeSeed::deserialize(Sink(&mut nest, 0), d)?;
        if let Some(why) = nest.ragged {
            return Err(serde::de::Error::custom(format!(
                "ragged nested data ({why}): nested lists must be rectangular, as the shape is"
            )));
        }
        Ok(Numbers(nest.values))
    }
}

/// What a (nested) list holds: its numbers in order, each depth's list length, the depth of
/// its numbers, and the first place it is not rectangular.
#[derive(Default)]
struct Nest {
    values: Vec<f32>,
    lens: Vec<Option<usize>>,
    leaf: Option<usize>,
    ragged: Option<String>,
}

/// Appends every number of a (nested) list at depth `.1` to the [`Nest`].
struct Sink<'a>(&'a mut Nest, usize);

impl<'de> serde::de::DeserializeSeed<'de> for Sink<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Sink<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("numbers, or lists of them")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (nest, depth) = (self.0, self.1);
        if let Some(n) = seq.size_hint() {
            nest.values.reserve(n);
        }
        let mut count = 0usize;
        while seq
            .next_element_seed(Sink(&mut *nest, depth + 1))?
            .is_some()
        {
            count += 1;
        }
        // an inner list ends before its outer one: lengths are kept by depth
        if nest.lens.len() <= depth {
            nest.lens.resize(depth + 1, None);
        }
        match nest.lens[depth] {
            None => nest.lens[depth] = Some(count),
            Some(len) if len == count => {}
            Some(len) => {
                if nest.ragged.is_none() {
                    nest.ragged =
                        Some(format!("lists of {len} and {count} at depth {}", depth + 1));
                }
            }
        }
        Ok(())
    }
    fn visit_f64<E: serde::de::Error>(self, x: f64) -> Result<(), E> {
        let (nest, depth) = (self.0, self.1);
        nest.values.push(finite(x).map_err(E::custom)?);
        match nest.leaf {
            None => nest.leaf = Some(depth),
            Some(d) if d == depth => {}
            Some(d) => {
                if nest.ragged.is_none() {
                    nest.ragged = Some(format!("numbers at depths {d} and {depth}"));
                }
            }
        }
        Ok(())
    }
    fn visit_i64<E: serde::de::Error>(self, x: i64) -> Result<(), E> {
        self.visit_f64(x as f64)
    }
    fn visit_u64<E: serde::de::Error>(self, x: u64) -> Result<(), E> {
        self.visit_f64(x as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn nested_data_must_be_rectangular() {
        let parse = |v: Value| serde_json::from_value::<Numbers>(v).map(|n| n.0);
        assert_eq!(
            parse(serde_json::json!([[1, 2], [3, 4]])).unwrap(),
            vec![1.0, 2.0, 3.0, 4.0]
        );
        assert_eq!(
            parse(serde_json::json!([1, 2, 3])).unwrap(),
            vec![1.0, 2.0, 3.0]
        );
        assert_eq!(
            parse(serde_json::json!([[[1], [2]]])).unwrap(),
            vec![1.0, 2.0]
        );
        let e = parse(serde_json::json!([[0, 0], [1, 2, 3, 4]]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ragged nested data (lists of 2 and 4 at depth 2)"),
            "{e}"
        );
        let e = parse(serde_json::json!([[0, 0], 1]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("numbers at depths 2 and 1"), "{e}");
    }
}

//! Property: loading random mutations of valid configs returns `Ok` or errors and
//! never panics. The seeds are the shipped examples (and the Envoy corpus when
//! `COURIER_ENVOY_CORPUS` is set); mutations remove nodes, change their JSON type,
//! put odd scalars in (negative, huge, empty, lower-cased), duplicate list items
//! and add unknown keys, anywhere in the tree (inside `typed_config`s too).

// A test (or benchmark setup) that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_config::load::{Format, parse_text};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::PathBuf;

fn seeds() -> Vec<Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files: Vec<PathBuf> = [
        "quickstart.yaml",
        "sidecar.yaml",
        "edge-gateway.yaml",
        "xds.yaml",
    ]
    .iter()
    .map(|f| root.join("examples").join(f))
    .collect();
    if let Some(dir) = std::env::var_os("COURIER_ENVOY_CORPUS") {
        let mut corpus: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        corpus.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
        corpus.sort();
        files.extend(corpus);
    }
    files
        .iter()
        .map(|f| parse_text(&std::fs::read_to_string(f).unwrap(), Format::Yaml).unwrap())
        .collect()
}

/// Every node of the tree, as a list of steps (object key or array index).
fn locations(v: &Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(prefix.clone());
    match v {
        Value::Object(o) => {
            for (k, child) in o {
                prefix.push(Step::Key(k.clone()));
                locations(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                prefix.push(Step::Index(i));
                locations(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

fn node_mut<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut cur = v;
    for step in path {
        cur = match (step, cur) {
            (Step::Key(k), Value::Object(o)) => o.get_mut(k)?,
            (Step::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn replacement(kind: u8, old: &Value) -> Value {
    match kind % 16 {
        0 => Value::Null,
        1 => json!(-1),
        2 => json!(u64::MAX),
        3 => json!(""),
        4 => json!("-1s"),
        5 => json!(true),
        6 => json!({}),
        7 => json!([]),
        8 => json!(1.5e300),
        9 => json!("not a valid thing ((["),
        10 => json!({"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster"}),
        11 => json!([old.clone(), old.clone()]),
        12 => json!({"bogus_field": old.clone()}),
        13 => match old {
            Value::String(s) => json!(s.to_lowercase()),
            other => json!(other.to_string()),
        },
        14 => json!(0),
        _ => json!("999999999999999999999s"),
    }
}

fn mutate(mut v: Value, picks: &[(usize, u8)]) -> Value {
    for &(which, kind) in picks {
        let mut all = Vec::new();
        locations(&v, &mut Vec::new(), &mut all);
        let path = &all[which % all.len()];
        if kind % 5 == 0 && !path.is_empty() {
            // Remove the node from its parent.
            let (last, parent) = path.split_last().unwrap();
            if let Some(p) = node_mut(&mut v, parent) {
                match (p, last) {
                    (Value::Object(o), Step::Key(k)) => {
                        o.remove(k);
                    }
                    (Value::Array(a), Step::Index(i)) if *i < a.len() => {
                        a.remove(*i);
                    }
                    _ => {}
                }
            }
        } else if let Some(node) = node_mut(&mut v, path) {
            *node = replacement(kind / 5, node);
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn mutated_configs_never_panic(seed in 0usize..64, picks in proptest::collection::vec((0usize..10_000, 0u8..80), 1..4)) {
        let seeds = seeds();
        let mutated = mutate(seeds[seed % seeds.len()].clone(), &picks);
        let text = serde_json::to_string(&mutated).unwrap();
        // Either outcome is fine; a panic fails the property.
        let _ = courier_config::bootstrap_from_str(&text, Format::Json);
    }
}

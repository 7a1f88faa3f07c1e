//! With one repetition there is no spread to measure: every standard error over repetitions
//! is empty (blank in CSV, null in JSON), never 0, in both tracks.

use crate::util::*;

/// Runs `spec` with its quick profile and one repetition (a profile appended to a copy) for
/// `methods`, and returns the aggregate CSV and summary.json.
fn one_repetition(spec: &str, methods: &str) -> (String, serde_json::Value) {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join(spec)).unwrap();
    let copy = tmp.path().join("spec.toml");
    std::fs::write(
        &copy,
        format!("{text}\n[profiles.one]\nrun.repetitions = 1\n"),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = uqbench(&[
        "run",
        copy.to_str().unwrap(),
        "--profile",
        "quick,one",
        "--methods",
        methods,
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let agg = std::fs::read_to_string(out.join("aggregate.csv")).unwrap();
    let json =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    (agg, json)
}

/// Every aggregate row's `stderr` (the sixth column) is blank.
fn assert_no_stderr(agg: &str, what: &str) {
    let header: Vec<&str> = agg.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "stderr").unwrap();
    let rows: Vec<&str> = agg
        .lines()
        .skip(1)
        .filter(|l| !l.split(',').nth(col).unwrap_or("").is_empty())
        .collect();
    assert!(
        rows.is_empty(),
        "{what}: {} aggregate rows carry a standard error with one repetition, e.g. {:?}",
        rows.len(),
        &rows[..rows.len().min(5)]
    );
}

#[test]
fn one_repetition_has_no_standard_errors() {
    let (agg, json) = one_repetition("experiments/e1.toml", "Ens");
    assert!(agg.lines().count() > 20, "{agg}");
    assert_no_stderr(&agg, "e1");
    // summary.json writes them as null.
    let text = json.to_string();
    assert!(
        text.contains("\"stderr\":null"),
        "no null stderr in summary.json"
    );
    // Per point too (the coverage's binomial error bar with k = 1 used to be written 0).
    fn numbered_stderr(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    let here = format!("{path}.{k}");
                    if k == "stderr" {
                        let numbers = match x {
                            serde_json::Value::Array(a) => a.iter().any(|e| e.is_number()),
                            other => other.is_number(),
                        };
                        if numbers {
                            out.push(here.clone());
                        }
                    }
                    numbered_stderr(x, &here, out);
                }
            }
            serde_json::Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    numbered_stderr(x, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    numbered_stderr(&json, "", &mut found);
    assert!(
        found.is_empty(),
        "standard errors with a value from one repetition: {:?}",
        &found[..found.len().min(5)]
    );
    let (agg, _) = one_repetition("experiments/tcc.toml", "Det,Ens");
    assert!(agg.contains(",accuracy,"), "{agg}");
    assert_no_stderr(&agg, "tcc");
}

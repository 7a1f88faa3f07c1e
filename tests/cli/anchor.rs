//! `uqbench anchor` and `check`.

use crate::util::*;

fn json(args: &[&str]) -> serde_json::Value {
    let o = uqbench(args);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("stdout is one JSON object")
}

#[test]
fn e1_json_has_every_field_with_consistent_lengths() {
    let v = json(&[
        "anchor",
        "experiments/e1.toml",
        "--setting",
        "f_main=2",
        "--rep",
        "3",
        "--json",
    ]);
    assert_eq!(v["setting"], "f_main=2");
    let n = v["train_x"].as_array().unwrap().len();
    assert_eq!(n, 50);
    assert_eq!(v["train_y"].as_array().unwrap().len(), n);
    assert_eq!(v["train_x"][0].as_array().unwrap().len(), 1); // rows of d = 1
    let m = v["test_x"].as_array().unwrap().len();
    assert_eq!(m, 1003);
    for key in ["truth", "mean", "std"] {
        assert_eq!(v[key].as_array().unwrap().len(), m, "{key}");
    }
    // σ per test input, as the Python package gives it (constant here).
    let sigma = v["sigma"].as_array().unwrap();
    assert_eq!(sigma.len(), m);
    assert!(sigma.iter().all(|s| *s == 0.75));
    assert_eq!(v["train_sigma"].as_array().unwrap().len(), n);
    assert!(v["validation_x"].is_null(), "E1 has no validation set");
    // The report points come last, with their labels.
    assert_eq!(v["report"][0]["label"], "x=-2.38");
    assert_eq!(v["test_x"][1000][0], -2.38);
    // Same arguments, same output; another repetition, other data.
    let again = json(&[
        "anchor",
        "experiments/e1.toml",
        "--setting",
        "f_main=2",
        "--rep",
        "3",
        "--json",
    ]);
    assert_eq!(v, again);
    let other = json(&[
        "anchor",
        "experiments/e1.toml",
        "--setting",
        "f_main=2",
        "--rep",
        "4",
        "--json",
    ]);
    assert_ne!(v["train_y"], other["train_y"]);
    assert_eq!(v["train_x"], other["train_x"]);
}

#[test]
fn e2_and_hetero_specs_print_rows_and_sigma_per_point() {
    let v = json(&[
        "anchor",
        "experiments/e2.toml",
        "--setting",
        "d=2",
        "--json",
    ]);
    assert_eq!(v["train_x"].as_array().unwrap().len(), 900);
    assert_eq!(v["test_x"][0].as_array().unwrap().len(), 2);
    assert_eq!(v["test_x"][0], serde_json::json!([-5.0, -5.0]));
    let h = json(&["anchor", "experiments/cubic_hetero.toml", "--json"]);
    let sigma = h["sigma"]
        .as_array()
        .expect("σ(x) is printed per test point");
    let x = h["test_x"][0][0].as_f64().unwrap();
    assert!((sigma[0].as_f64().unwrap() - (0.1 + x * x)).abs() < 1e-12);
}

#[test]
fn summary_mode_and_check_work_on_every_shipped_spec() {
    for entry in std::fs::read_dir(root().join("experiments")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let p = path.to_str().unwrap();
            let o = uqbench(&["check", p]);
            assert!(o.status.success(), "check {p}: {}", stderr(&o));
            let o = uqbench(&["anchor", p]);
            assert!(o.status.success(), "anchor {p}: {}", stderr(&o));
        }
    }
}

#[test]
fn bad_settings_are_clear_errors() {
    let o = uqbench(&["anchor", "experiments/e1.toml", "--setting", "fmain=2"]);
    assert_clean_error(&o, &["fmain", "f_main"]);
    let o = uqbench(&["anchor", "experiments/e1.toml", "--setting", "f_main=abc"]);
    assert_clean_error(&o, &["abc", "not a finite number"]);
    // A value off the sweep is a different problem than the user may think they asked for.
    let o = uqbench(&["anchor", "experiments/e1.toml", "--setting", "f_main=3.7"]);
    assert_clean_error(&o, &["3.7", "sweep.f_main", "1, 2, 3", "off_sweep = true"]);
    let o = uqbench(&["anchor", "experiments/does-not-exist.toml"]);
    assert_clean_error(&o, &["does-not-exist.toml"]);
}

#[test]
fn a_closed_output_pipe_ends_a_command_quietly() {
    // `uqbench check … | head -1` and `uqbench anchor … --json | head -c 100`: the reader
    // goes away after one line; the command exits 0 without a panic message.
    use std::io::{BufRead, BufReader, Read};
    for (args, one_line) in [
        (vec!["check", "experiments/e1.toml"], true),
        (vec!["anchor", "experiments/e1.toml", "--json"], false),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_uqbench"))
            .args(&args)
            .current_dir(root())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        if one_line {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).unwrap();
            assert!(!line.is_empty());
        } else {
            let mut head = [0u8; 100];
            let mut stdout = stdout;
            stdout.read_exact(&mut head).unwrap();
        }
        // The pipe's read end is closed here.
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
    }
}

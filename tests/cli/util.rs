//! What the end-to-end tests share: running the binary and checking its errors.

pub use std::path::{Path, PathBuf};
pub use std::process::{Command, Output};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn uqbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_uqbench"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the uqbench binary runs")
}

/// [`uqbench`] with extra environment variables.
pub fn uqbench_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_uqbench"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root())
        .output()
        .expect("the uqbench binary runs")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a clean failure: exit code 1 (not a panic's 101) and every `needle` in stderr.
pub fn assert_clean_error(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "expected exit code 1, stderr:\n{err}"
    );
    assert!(!err.contains("panicked"), "panicked:\n{err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}:\n{err}");
    }
}

/// Whether the wgpu tests are left out on purpose (`UQBENCH_SKIP_WGPU=1`, for a machine
/// without Vulkan; CI never sets it, so there a missing adapter fails the tests).
pub fn skip_wgpu() -> bool {
    std::env::var("UQBENCH_SKIP_WGPU").is_ok_and(|v| v == "1")
}

/// `uqbench run experiments/e1.toml --profile quick --quiet --out OUT` with `extra`.
pub fn run_quick(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "experiments/e1.toml",
        "--profile",
        "quick",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    uqbench(&args)
}

/// `uqbench run SPEC --quiet --out OUT` with `extra`, asserting that it succeeds.
pub fn run_spec(spec: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec![
        "run",
        spec.to_str().unwrap(),
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = uqbench(&args);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Files under `dir` whose extension is `ext` (`json`: repetition files; `draws`: their
/// draws files), recursively (0 for a missing directory).
pub fn count_files(dir: &Path, ext: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|e| {
            let p = e.unwrap().path();
            if p.is_dir() {
                count_files(&p, ext)
            } else {
                usize::from(p.extension().is_some_and(|e| e == ext))
            }
        })
        .sum()
}

/// Every file under `dir`, relative to it, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// A spec `dir/spec.toml` with cubic.toml's problem and the given `[run]` and method tables.
pub fn cubic_spec(dir: &Path, rest: &str) -> PathBuf {
    let text = std::fs::read_to_string(root().join("experiments/cubic.toml")).unwrap();
    let base = &text[..text.find("\n[run]").unwrap()];
    let spec = dir.join("spec.toml");
    std::fs::write(&spec, format!("{base}\n{rest}")).unwrap();
    spec
}

/// Every metric of a finished run's `summary.json` (its region aggregates, per-point metrics
/// and per-repetition values) is in the metric catalogue, or is a scalar some method of the
/// run recorded in its repetition files (`learned_p`, `rhat_max`, …): nothing else may name a
/// metric.
pub fn assert_catalogued(out: &Path) {
    use std::collections::BTreeSet;
    use uqbench_experiment::summary::catalogue::lookup;
    let mut scalars = BTreeSet::new();
    let reps = out.join("reps");
    for f in files_under(&reps)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "json"))
    {
        let rep: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(reps.join(f)).unwrap()).unwrap();
        if let Some(s) = rep["scalars"].as_object() {
            scalars.extend(s.keys().cloned());
        }
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let mut names = BTreeSet::new();
    for s in summary["settings"].as_array().unwrap() {
        for m in s["methods"].as_object().unwrap().values() {
            for region in m["aggregate"].as_object().unwrap().values() {
                names.extend(region.as_object().unwrap().keys().cloned());
            }
            for key in ["points", "per_repetition"] {
                if let Some(o) = m[key].as_object() {
                    names.extend(o.keys().cloned());
                }
            }
        }
    }
    assert!(names.len() > 10, "{names:?}");
    let stray: Vec<&String> = names
        .iter()
        .filter(|n| lookup(n).is_none() && !scalars.contains(*n))
        .collect();
    assert!(stray.is_empty(), "metrics outside the catalogue: {stray:?}");
}

/// Φ by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7 in erfc): independent of the code under
/// test.
pub fn normal_cdf(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        1.0 - 0.5 * erfc
    } else {
        0.5 * erfc
    }
}

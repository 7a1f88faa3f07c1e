//! Build-time provenance for `run.json`: the git commit the binary was built from (with
//! `-dirty` when tracked files differed from it), the compiler's version and the burn version
//! in the lock file. Anything that cannot be found is "unknown".

use std::path::Path;
use std::process::Command;

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let git = root.join(".git");
    // Rerun when the commit (HEAD, the branch it points to) or the index changes, and when any
    // source under crates/ does (cargo scans a directory's files), so that `-dirty` says
    // whether the sources compiled into this binary differed from the commit at build time,
    // not only when the last commit was made.
    println!("cargo:rerun-if-changed={}", root.join("crates").display());
    println!("cargo:rerun-if-changed={}", git.join("HEAD").display());
    println!("cargo:rerun-if-changed={}", git.join("index").display());
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        if let Some(r) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed={}", git.join(r).display());
        }
    }
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );
    let root_s = root.to_string_lossy().to_string();
    let commit = output("git", &["-C", &root_s, "rev-parse", "HEAD"])
        .map(|c| {
            let dirty = output(
                "git",
                &[
                    "-C",
                    &root_s,
                    "status",
                    "--porcelain",
                    "--untracked-files=no",
                ],
            )
            .is_some();
            if dirty {
                format!("{c}-dirty")
            } else {
                c
            }
        })
        .unwrap_or_else(|| "unknown".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc = output(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into());
    let burn = std::fs::read_to_string(root.join("Cargo.lock"))
        .ok()
        .and_then(|lock| {
            let at = lock.find("\nname = \"burn\"\n")?;
            let rest = &lock[at..];
            let v = rest.lines().nth(2)?.strip_prefix("version = \"")?;
            Some(v.trim_end_matches('"').to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=UQBENCH_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=UQBENCH_RUSTC={rustc}");
    println!("cargo:rustc-env=UQBENCH_BURN={burn}");
}

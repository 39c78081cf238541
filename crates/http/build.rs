//! Records the source's git commit for `GET /` (`git_sha`, as CouchDB reports the commit
//! it was built from): `SETTEE_GIT_SHA` if set, else `git rev-parse --short=9 HEAD`, else
//! `unknown` (a build outside a git checkout).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=SETTEE_GIT_SHA");
    let sha = std::env::var("SETTEE_GIT_SHA")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["rev-parse", "--short=9", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    // A new commit moves HEAD (or its reflog); rerun then, not on every source change.
    for path in ["HEAD", "logs/HEAD"] {
        // A path that does not exist would make cargo rerun this on every build.
        if let Some(p) =
            git(&["rev-parse", "--git-path", path]).filter(|p| std::path::Path::new(p).exists())
        {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rustc-env=SETTEE_GIT_SHA={sha}");
}

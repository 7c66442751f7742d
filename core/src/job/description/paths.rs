//! Which paths a job file may name: nothing it names may lead out of the job
//! directory.
//!
//! On the executor every staged file (the executable and each input) lands in
//! the job directory under its base name, and every output file is read back
//! from it and written next to the job file on the submitter; so:
//! - an output file is a plain name (no `/`, not `.` or `..`);
//! - an input file is a relative path with no `..` component (it is read from
//!   beside the job file) and a base name that is a plain name;
//! - the executable is the same, except that it may be absolute: `p2pjob run
//!   /bin/hostname` names a program by its absolute path (only its base name
//!   reaches the job directory).
//!
//! Symbolic links cannot be judged from the text: the executor refuses to
//! follow them when it writes staged files and reads output files back.

/// Longest name of one file in the job directory (as most file systems allow).
pub const MAX_NAME: usize = 255;

/// What a path in a job file is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathUse {
    /// `<executable>`: staged by base name; may be absolute.
    Executable,
    /// `<inputfile>`: staged by base name, read from beside the job file.
    Input,
    /// `<outputfile>`: read back from the job directory.
    Output,
}

/// Why a path is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathProblem {
    /// Starts with `/`.
    #[error("is an absolute path; paths in a job file are relative to it and stay inside the job directory")]
    Absolute,
    /// Has a `..` component.
    #[error("has a \"..\" component, which leads out of the job directory")]
    ParentDir,
    /// An output file with a directory part.
    #[error("is not a plain file name (output files are read back from the top of the job directory)")]
    NotPlain,
    /// Its name in the job directory is empty, `.`, too long, or holds `\` or NUL.
    #[error("does not name a file in the job directory")]
    BadName,
}

/// True when `name` can be one file's name directly inside the job directory.
pub fn plain_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// Checks one path of a job file (already trimmed) against what it is used for.
pub fn check_path(path: &str, used: PathUse) -> Result<(), PathProblem> {
    if path.split('/').any(|c| c == "..") {
        return Err(PathProblem::ParentDir);
    }
    if path.starts_with('/') && used != PathUse::Executable {
        return Err(PathProblem::Absolute);
    }
    if used == PathUse::Output && path.contains('/') {
        return Err(PathProblem::NotPlain);
    }
    if !plain_name(super::staged_name(path)) {
        return Err(PathProblem::BadName);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_leave_the_job_directory_are_refused() {
        use PathProblem::*;
        use PathUse::*;
        let cases: &[(&str, PathUse, Result<(), PathProblem>)] = &[
            ("ring", Executable, Ok(())),
            ("bin/ring", Executable, Ok(())),
            ("./ring", Executable, Ok(())),
            ("/usr/bin/hostname", Executable, Ok(())),
            ("../ring", Executable, Err(ParentDir)),
            ("/opt/../etc/ring", Executable, Err(ParentDir)),
            ("data/in.txt", Input, Ok(())),
            ("/etc/passwd", Input, Err(Absolute)),
            ("../x", Input, Err(ParentDir)),
            ("a/../../x", Input, Err(ParentDir)),
            ("a/..", Input, Err(ParentDir)),
            ("dir/", Input, Err(BadName)),
            ("a\\b", Input, Err(BadName)),
            ("out.txt", Output, Ok(())),
            ("..", Output, Err(ParentDir)),
            ("../../x", Output, Err(ParentDir)),
            ("/etc/shadow", Output, Err(Absolute)),
            ("sub/out.txt", Output, Err(NotPlain)),
            (".", Output, Err(BadName)),
        ];
        for (path, used, want) in cases {
            assert_eq!(check_path(path, *used), *want, "{path:?} as {used:?}");
        }
        assert!(plain_name(&"x".repeat(MAX_NAME)) && !plain_name(&"x".repeat(MAX_NAME + 1)));
    }
}

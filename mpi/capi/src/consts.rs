//! The handles and constants of `mpi/include/mpi.h`, on the Rust side. The
//! test at the bottom reads the header and checks every value agrees.

use std::ffi::c_int;

/// `MPI_Comm`, `MPI_Datatype`, `MPI_Op`, `MPI_Request`, `MPI_Errhandler`: plain ints.
pub(crate) type Handle = c_int;

pub(crate) const MPI_COMM_NULL: Handle = 0;
pub(crate) const MPI_COMM_WORLD: Handle = 1;
pub(crate) const MPI_COMM_SELF: Handle = 2;

#[allow(dead_code)] // Only C uses it; the test pins it.
pub(crate) const MPI_ERRHANDLER_NULL: Handle = 0;
pub(crate) const MPI_ERRORS_ARE_FATAL: Handle = 1;
pub(crate) const MPI_ERRORS_RETURN: Handle = 2;

pub(crate) const MPI_REQUEST_NULL: Handle = 0;
pub(crate) const MPI_PROC_NULL: c_int = -1;
pub(crate) const MPI_ANY_SOURCE: c_int = -2;
pub(crate) const MPI_ANY_TAG: c_int = -1;
pub(crate) const MPI_UNDEFINED: c_int = -32766;
/// `MPI_STATUS_IGNORE` and `MPI_STATUSES_IGNORE` are this address.
pub(crate) const STATUS_IGNORE_ADDR: usize = 1;
/// `MPI_IN_PLACE` is this address (`(void *)-1`).
pub(crate) const IN_PLACE_ADDR: usize = usize::MAX;
pub(crate) const MPI_MAX_PROCESSOR_NAME: c_int = 256;
pub(crate) const MPI_MAX_ERROR_STRING: c_int = 512;

pub(crate) const MPI_THREAD_SINGLE: c_int = 0;
pub(crate) const MPI_THREAD_FUNNELED: c_int = 1;
#[allow(dead_code)] // Only C uses it; the test pins it.
pub(crate) const MPI_THREAD_SERIALIZED: c_int = 2;
pub(crate) const MPI_THREAD_MULTIPLE: c_int = 3;

pub(crate) const MPI_VERSION: c_int = 1;
pub(crate) const MPI_SUBVERSION: c_int = 3;

/// The error classes with their names, in class order (`MPI_SUCCESS` = 0 first).
pub(crate) const ERROR_CLASSES: [(&str, &str); 20] = [
    ("MPI_SUCCESS", "no error"),
    ("MPI_ERR_BUFFER", "invalid buffer pointer"),
    ("MPI_ERR_COUNT", "invalid count argument"),
    ("MPI_ERR_TYPE", "invalid datatype"),
    ("MPI_ERR_TAG", "invalid tag"),
    ("MPI_ERR_COMM", "invalid communicator"),
    ("MPI_ERR_RANK", "invalid rank"),
    ("MPI_ERR_ROOT", "invalid root"),
    ("MPI_ERR_GROUP", "invalid group"),
    ("MPI_ERR_OP", "invalid reduce operation"),
    ("MPI_ERR_TOPOLOGY", "invalid topology"),
    ("MPI_ERR_DIMS", "invalid dimension argument"),
    ("MPI_ERR_ARG", "invalid argument"),
    ("MPI_ERR_UNKNOWN", "unknown error"),
    ("MPI_ERR_TRUNCATE", "message truncated"),
    ("MPI_ERR_OTHER", "other error"),
    ("MPI_ERR_INTERN", "internal error"),
    ("MPI_ERR_IN_STATUS", "error code is in status"),
    ("MPI_ERR_PENDING", "pending request"),
    ("MPI_ERR_REQUEST", "invalid request"),
];

pub(crate) const MPI_SUCCESS: c_int = 0;
pub(crate) const MPI_ERR_BUFFER: c_int = 1;
pub(crate) const MPI_ERR_COUNT: c_int = 2;
pub(crate) const MPI_ERR_TYPE: c_int = 3;
pub(crate) const MPI_ERR_TAG: c_int = 4;
pub(crate) const MPI_ERR_COMM: c_int = 5;
pub(crate) const MPI_ERR_RANK: c_int = 6;
pub(crate) const MPI_ERR_ROOT: c_int = 7;
pub(crate) const MPI_ERR_OP: c_int = 9;
pub(crate) const MPI_ERR_ARG: c_int = 12;
pub(crate) const MPI_ERR_TRUNCATE: c_int = 14;
pub(crate) const MPI_ERR_OTHER: c_int = 15;
pub(crate) const MPI_ERR_INTERN: c_int = 16;
pub(crate) const MPI_ERR_IN_STATUS: c_int = 17;
pub(crate) const MPI_ERR_REQUEST: c_int = 19;
#[allow(dead_code)] // Only C uses it; the test pins it.
pub(crate) const MPI_ERR_LASTCODE: c_int = 19;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::datatype::{DATATYPES, Datatype};
    use crate::op::OPS;

    /// `#define NAME VALUE` lines of mpi.h, the value stripped of a `((Type)..)` cast.
    fn header_defines() -> BTreeMap<String, String> {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../include/mpi.h")).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("#define "))
            .filter_map(|l| l.split_once(' '))
            .map(|(name, value)| {
                let v = value.trim();
                let v = match v.strip_prefix("((").and_then(|v| v.strip_suffix(')')) {
                    Some(inner) => inner.split_once(')').map_or(inner, |(_, n)| n),
                    None => v,
                };
                (name.to_string(), v.trim_matches(|c| c == '(' || c == ')').to_string())
            })
            .collect()
    }

    #[test]
    fn the_header_agrees_with_the_rust_side() {
        let h = header_defines();
        let int = |name: &str| -> i64 {
            let v = h.get(name).unwrap_or_else(|| panic!("{name} missing from mpi.h"));
            v.parse().unwrap_or_else(|_| panic!("{name} = {v:?} is not a number"))
        };
        let mut want: Vec<(&str, i64)> = vec![
            ("MPI_COMM_NULL", MPI_COMM_NULL.into()),
            ("MPI_COMM_WORLD", MPI_COMM_WORLD.into()),
            ("MPI_COMM_SELF", MPI_COMM_SELF.into()),
            ("MPI_ERRHANDLER_NULL", MPI_ERRHANDLER_NULL.into()),
            ("MPI_ERRORS_ARE_FATAL", MPI_ERRORS_ARE_FATAL.into()),
            ("MPI_ERRORS_RETURN", MPI_ERRORS_RETURN.into()),
            ("MPI_REQUEST_NULL", MPI_REQUEST_NULL.into()),
            ("MPI_PROC_NULL", MPI_PROC_NULL.into()),
            ("MPI_ANY_SOURCE", MPI_ANY_SOURCE.into()),
            ("MPI_ANY_TAG", MPI_ANY_TAG.into()),
            ("MPI_UNDEFINED", MPI_UNDEFINED.into()),
            ("MPI_STATUS_IGNORE", STATUS_IGNORE_ADDR as i64),
            ("MPI_STATUSES_IGNORE", STATUS_IGNORE_ADDR as i64),
            ("MPI_IN_PLACE", IN_PLACE_ADDR as isize as i64),
            ("MPI_MAX_PROCESSOR_NAME", MPI_MAX_PROCESSOR_NAME.into()),
            ("MPI_MAX_ERROR_STRING", MPI_MAX_ERROR_STRING.into()),
            ("MPI_THREAD_SINGLE", MPI_THREAD_SINGLE.into()),
            ("MPI_THREAD_FUNNELED", MPI_THREAD_FUNNELED.into()),
            ("MPI_THREAD_SERIALIZED", MPI_THREAD_SERIALIZED.into()),
            ("MPI_THREAD_MULTIPLE", MPI_THREAD_MULTIPLE.into()),
            ("MPI_VERSION", MPI_VERSION.into()),
            ("MPI_SUBVERSION", MPI_SUBVERSION.into()),
            ("MPI_ERR_LASTCODE", MPI_ERR_LASTCODE.into()),
            ("MPI_DATATYPE_NULL", 0),
            ("MPI_OP_NULL", 0),
        ];
        for (class, (name, _)) in ERROR_CLASSES.iter().enumerate() {
            want.push((name, class as i64));
        }
        for (name, dt) in DATATYPES {
            want.push((name, (dt as Datatype as i64)));
        }
        for (name, handle, _) in OPS {
            want.push((name, handle.into()));
        }
        // The class constants the code uses name the right table entry.
        for (c, name) in [
            (MPI_SUCCESS, "MPI_SUCCESS"),
            (MPI_ERR_BUFFER, "MPI_ERR_BUFFER"),
            (MPI_ERR_COUNT, "MPI_ERR_COUNT"),
            (MPI_ERR_TYPE, "MPI_ERR_TYPE"),
            (MPI_ERR_TAG, "MPI_ERR_TAG"),
            (MPI_ERR_COMM, "MPI_ERR_COMM"),
            (MPI_ERR_RANK, "MPI_ERR_RANK"),
            (MPI_ERR_ROOT, "MPI_ERR_ROOT"),
            (MPI_ERR_OP, "MPI_ERR_OP"),
            (MPI_ERR_ARG, "MPI_ERR_ARG"),
            (MPI_ERR_TRUNCATE, "MPI_ERR_TRUNCATE"),
            (MPI_ERR_OTHER, "MPI_ERR_OTHER"),
            (MPI_ERR_INTERN, "MPI_ERR_INTERN"),
            (MPI_ERR_IN_STATUS, "MPI_ERR_IN_STATUS"),
            (MPI_ERR_REQUEST, "MPI_ERR_REQUEST"),
        ] {
            assert_eq!(ERROR_CLASSES[c as usize].0, name);
        }
        for &(name, value) in &want {
            assert_eq!(int(name), value, "{name}");
        }
        // Every MPI_ name the header defines is checked above (or is an alias).
        let aliases = ["MPI_LONG_LONG_INT"];
        for name in h.keys().filter(|n| n.starts_with("MPI_")) {
            let checked = want.iter().any(|(n, _)| n == name);
            assert!(checked || aliases.contains(&name.as_str()), "{name} not checked");
        }
    }

    #[test]
    fn the_status_layout_is_the_headers() {
        // mpi.h's _Static_assert pins the C side to 24 bytes.
        assert_eq!(std::mem::size_of::<crate::status::MpiStatus>(), 24);
        assert_eq!(std::mem::align_of::<crate::status::MpiStatus>(), 8);
    }
}

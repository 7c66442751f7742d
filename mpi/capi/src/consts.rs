//! The handles and constants of `mpi/include/mpi.h`, on the Rust side. The
//! test at the bottom reads the header and checks every value agrees.

use std::ffi::c_int;

/// `MPI_Comm`, `MPI_Datatype`, `MPI_Op`, `MPI_Request`, `MPI_Errhandler`: plain ints.
pub(crate) type Handle = c_int;

pub(crate) const MPI_COMM_NULL: Handle = 0;
pub(crate) const MPI_COMM_WORLD: Handle = 1;
pub(crate) const MPI_COMM_SELF: Handle = 2;

pub(crate) const MPI_GROUP_NULL: Handle = 0;
pub(crate) const MPI_GROUP_EMPTY: Handle = 1;

pub(crate) const MPI_IDENT: c_int = 0;
pub(crate) const MPI_CONGRUENT: c_int = 1;
pub(crate) const MPI_SIMILAR: c_int = 2;
pub(crate) const MPI_UNEQUAL: c_int = 3;

pub(crate) const MPI_INFO_NULL: Handle = 0;
pub(crate) const MPI_ROOT: c_int = -3;
pub(crate) const MPI_CART: c_int = 2;
pub(crate) const MPI_GRAPH: c_int = 1;
pub(crate) const MPI_DATATYPE_NULL: Handle = 0;
pub(crate) const MPI_OP_NULL: Handle = 0;
pub(crate) const MPI_MAX_OBJECT_NAME: c_int = 128;

pub(crate) const MPI_KEYVAL_INVALID: c_int = 0;
pub(crate) const MPI_TAG_UB: c_int = 1;
pub(crate) const MPI_HOST: c_int = 2;
pub(crate) const MPI_IO: c_int = 3;
pub(crate) const MPI_WTIME_IS_GLOBAL: c_int = 4;
pub(crate) const MPI_UNIVERSE_SIZE: c_int = 5;
pub(crate) const MPI_APPNUM: c_int = 6;
pub(crate) const MPI_LASTUSEDCODE: c_int = 7;

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
pub(crate) const MPI_ERR_GROUP: c_int = 8;
pub(crate) const MPI_ERR_OP: c_int = 9;
pub(crate) const MPI_ERR_TOPOLOGY: c_int = 10;
pub(crate) const MPI_ERR_DIMS: c_int = 11;
pub(crate) const MPI_ERR_ARG: c_int = 12;
pub(crate) const MPI_ERR_TRUNCATE: c_int = 14;
pub(crate) const MPI_ERR_OTHER: c_int = 15;
pub(crate) const MPI_ERR_INTERN: c_int = 16;
pub(crate) const MPI_ERR_IN_STATUS: c_int = 17;
pub(crate) const MPI_ERR_REQUEST: c_int = 19;
pub(crate) const MPI_ERR_LASTCODE: c_int = 19;

/// Every integer `#define` of mpi.h the Rust side does not name above, with its
/// value (datatypes, operations, combiners, ...: their own modules hold the
/// meaning; the test checks the header agrees).
#[cfg(test)]
pub(crate) const OTHER_HEADER_INTS: &[(&str, i64)] = &[
    ("P2PMPI", 1),
    ("MPI_BOTTOM", 0),
    ("MPI_CHARACTER", 0),
    ("MPI_INTEGER", 0),
    ("MPI_REAL", 0),
    ("MPI_DOUBLE_PRECISION", 0),
    ("MPI_COMPLEX", 0),
    ("MPI_DOUBLE_COMPLEX", 0),
    ("MPI_LOGICAL", 0),
    ("MPI_2INTEGER", 0),
    ("MPI_2REAL", 0),
    ("MPI_2DOUBLE_PRECISION", 0),
    ("MPI_CXX_BOOL", 0),
    ("MPI_CXX_FLOAT_COMPLEX", 0),
    ("MPI_CXX_DOUBLE_COMPLEX", 0),
    ("MPI_CXX_LONG_DOUBLE_COMPLEX", 0),
    ("MPI_NULL_COPY_FN", 0),
    ("MPI_NULL_DELETE_FN", 0),
    ("MPI_COMM_NULL_COPY_FN", 0),
    ("MPI_COMM_NULL_DELETE_FN", 0),
    ("MPI_MAX_INFO_KEY", 255),
    ("MPI_MAX_INFO_VAL", 1024),
    ("MPI_BSEND_OVERHEAD", 64),
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// `#define NAME VALUE` lines of mpi.h whose value is an integer, the value
    /// stripped of a `((Type)..)` cast.
    fn header_ints() -> BTreeMap<String, i64> {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../include/mpi.h")).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("#define "))
            .filter_map(|l| l.split_once(' '))
            .filter_map(|(name, value)| {
                let v = value.trim();
                let v = match v.strip_prefix("((").and_then(|v| v.strip_suffix(')')) {
                    Some(inner) => inner.split_once(')').map_or(inner, |(_, n)| n),
                    None => v,
                };
                let v = v.trim_matches(|c| c == '(' || c == ')');
                v.parse().ok().map(|v| (name.to_string(), v))
            })
            .collect()
    }

    /// Every integer constant of the Rust side that mirrors the header.
    fn rust_side() -> Vec<(String, i64)> {
        let mut want: Vec<(String, i64)> = [
            ("MPI_COMM_NULL", MPI_COMM_NULL.into()),
            ("MPI_COMM_WORLD", MPI_COMM_WORLD.into()),
            ("MPI_COMM_SELF", MPI_COMM_SELF.into()),
            ("MPI_GROUP_NULL", MPI_GROUP_NULL.into()),
            ("MPI_GROUP_EMPTY", MPI_GROUP_EMPTY.into()),
            ("MPI_IDENT", MPI_IDENT.into()),
            ("MPI_CONGRUENT", MPI_CONGRUENT.into()),
            ("MPI_SIMILAR", MPI_SIMILAR.into()),
            ("MPI_UNEQUAL", MPI_UNEQUAL.into()),
            ("MPI_INFO_NULL", MPI_INFO_NULL.into()),
            ("MPI_ROOT", MPI_ROOT.into()),
            ("MPI_CART", MPI_CART.into()),
            ("MPI_GRAPH", MPI_GRAPH.into()),
            ("MPI_DATATYPE_NULL", MPI_DATATYPE_NULL.into()),
            ("MPI_OP_NULL", MPI_OP_NULL.into()),
            ("MPI_MAX_OBJECT_NAME", MPI_MAX_OBJECT_NAME.into()),
            ("MPI_KEYVAL_INVALID", MPI_KEYVAL_INVALID.into()),
            ("MPI_TAG_UB", MPI_TAG_UB.into()),
            ("MPI_HOST", MPI_HOST.into()),
            ("MPI_IO", MPI_IO.into()),
            ("MPI_WTIME_IS_GLOBAL", MPI_WTIME_IS_GLOBAL.into()),
            ("MPI_UNIVERSE_SIZE", MPI_UNIVERSE_SIZE.into()),
            ("MPI_APPNUM", MPI_APPNUM.into()),
            ("MPI_LASTUSEDCODE", MPI_LASTUSEDCODE.into()),
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
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
        for (class, (name, _)) in ERROR_CLASSES.iter().enumerate() {
            want.push((name.to_string(), class as i64));
        }
        want.extend(OTHER_HEADER_INTS.iter().map(|&(n, v)| (n.to_string(), v)));
        want.extend(crate::types::header_ints());
        want.extend(crate::ops::header_ints());
        want
    }

    #[test]
    fn the_header_agrees_with_the_rust_side() {
        let h = header_ints();
        let want = rust_side();
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
            (MPI_ERR_GROUP, "MPI_ERR_GROUP"),
            (MPI_ERR_OP, "MPI_ERR_OP"),
            (MPI_ERR_TOPOLOGY, "MPI_ERR_TOPOLOGY"),
            (MPI_ERR_DIMS, "MPI_ERR_DIMS"),
            (MPI_ERR_ARG, "MPI_ERR_ARG"),
            (MPI_ERR_TRUNCATE, "MPI_ERR_TRUNCATE"),
            (MPI_ERR_OTHER, "MPI_ERR_OTHER"),
            (MPI_ERR_INTERN, "MPI_ERR_INTERN"),
            (MPI_ERR_IN_STATUS, "MPI_ERR_IN_STATUS"),
            (MPI_ERR_REQUEST, "MPI_ERR_REQUEST"),
        ] {
            assert_eq!(ERROR_CLASSES[c as usize].0, name);
        }
        for (name, value) in &want {
            assert_eq!(h.get(name), Some(value), "{name}");
        }
        // Every integer the header defines is checked above.
        for name in h.keys() {
            assert!(want.iter().any(|(n, _)| n == name), "{name} not checked");
        }
    }

    #[test]
    fn the_status_layout_is_the_headers() {
        // mpi.h's _Static_assert pins the C side to 24 bytes.
        assert_eq!(std::mem::size_of::<crate::status::MpiStatus>(), 24);
        assert_eq!(std::mem::align_of::<crate::status::MpiStatus>(), 8);
    }
}

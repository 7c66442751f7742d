//! The predefined reduction operations and the datatypes each accepts.

use p2pmp_mpi::Op;

use crate::consts::{Handle, MPI_ERR_OP};
use crate::datatype::{Datatype, Kind};
use crate::error::Fail;

/// Every operation with its `mpi.h` name and handle.
pub(crate) const OPS: [(&str, Handle, Op); 8] = [
    ("MPI_MAX", 1, Op::Max),
    ("MPI_MIN", 2, Op::Min),
    ("MPI_SUM", 3, Op::Sum),
    ("MPI_PROD", 4, Op::Prod),
    ("MPI_LAND", 5, Op::LogicalAnd),
    ("MPI_BAND", 6, Op::BitAnd),
    ("MPI_LOR", 7, Op::LogicalOr),
    ("MPI_BOR", 8, Op::BitOr),
];

/// The operation of handle `h` if it may reduce `dt` (MPI-1 §4.9.2: min, max,
/// sum and product on integers and floats; logical ones on integers; bitwise
/// ones on integers and bytes); `MPI_ERR_OP` otherwise.
pub(crate) fn for_datatype(h: Handle, dt: Datatype) -> Result<Op, Fail> {
    let (name, _, op) = OPS
        .iter()
        .find(|(_, handle, _)| *handle == h)
        .ok_or_else(|| Fail::new(MPI_ERR_OP, format!("op handle {h} is not a predefined operation")))?;
    let ok = match (op, dt.kind()) {
        (_, Kind::Text) => false,
        (_, Kind::Integer) => true,
        (Op::BitAnd | Op::BitOr, Kind::Byte) => true,
        (Op::Max | Op::Min | Op::Sum | Op::Prod, Kind::Float) => true,
        _ => false,
    };
    if ok { Ok(*op) } else { Err(Fail::new(MPI_ERR_OP, format!("{name} does not apply to datatype {dt:?}"))) }
}

/// The header's operation handles.
#[cfg(test)]
pub(crate) fn header_ints() -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> = OPS.iter().map(|(n, h, _)| (n.to_string(), i64::from(*h))).collect();
    v.extend(
        [("MPI_LXOR", 9), ("MPI_BXOR", 10), ("MPI_MINLOC", 11), ("MPI_MAXLOC", 12)].map(|(n, x)| (n.to_string(), x)),
    );
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_accept_exactly_the_mpi_datatypes() {
        assert_eq!(for_datatype(3, Datatype::Double).unwrap(), Op::Sum);
        assert_eq!(for_datatype(6, Datatype::Byte).unwrap(), Op::BitAnd);
        assert_eq!(for_datatype(5, Datatype::Int).unwrap(), Op::LogicalAnd);
        for (h, dt) in [
            (3, Datatype::Byte),
            (6, Datatype::Float),
            (7, Datatype::Double),
            (1, Datatype::Char),
            (0, Datatype::Int),
            (9, Datatype::Int),
        ] {
            assert_eq!(for_datatype(h, dt).unwrap_err().class, MPI_ERR_OP, "{h} {dt:?}");
        }
    }
}

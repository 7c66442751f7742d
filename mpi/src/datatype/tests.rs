//! Layouts against hand-worked examples and, for random type trees, against a
//! naive type map built by the definitions of MPI-1 §3.12.

use proptest::prelude::*;

use super::*;

fn int() -> Layout {
    Layout::basic(Basic::Int)
}

fn runs(l: &Layout, n: u64) -> Vec<(i64, u64)> {
    l.runs(n).map(|r| (r.off, r.len)).collect()
}

#[test]
fn vectors_indexed_and_contiguous_types_lay_out_as_the_standard_says() {
    let v = Layout::vector(3, 2, 4, false, &int()).unwrap();
    assert_eq!(runs(&v, 1), [(0, 8), (16, 8), (32, 8)]);
    assert_eq!((v.size(), v.lb(), v.ub(), v.extent()), (24, 0, 40, 40));
    assert_eq!(runs(&v, 2)[3], (40, 8), "the second element starts one extent later");
    let c = Layout::contiguous(5, &int()).unwrap();
    assert!(c.is_contiguous());
    assert_eq!(runs(&c, 3), [(0, 60)], "contiguous elements are one run");
    let h = Layout::vector(2, 1, -8, true, &int()).unwrap();
    assert_eq!((runs(&h, 1), h.lb(), h.ub()), (vec![(0, 4), (-8, 4)], -8, 4));
    let ix = Layout::indexed(&[1, 2], &[3, 0], false, &int()).unwrap();
    assert_eq!((runs(&ix, 1), ix.lb(), ix.ub()), (vec![(12, 4), (0, 8)], 0, 16));
    assert!(!ix.is_contiguous());
    assert_eq!(Layout::contiguous(0, &int()).unwrap().extent(), 0);
}

#[test]
fn one_run_is_given_alone_where_the_elements_make_one() {
    let run = |l: &Layout, n| l.single_run(n).map(|r| (r.off, r.len));
    let c = Layout::contiguous(5, &int()).unwrap();
    assert_eq!(run(&c, 3), Some((0, 60)), "contiguous elements");
    let one = Layout::indexed(&[2], &[3], false, &int()).unwrap();
    assert_eq!((run(&one, 1), run(&one, 2)), (Some((12, 8)), None), "one element's run, not two elements'");
    let v = Layout::vector(3, 2, 4, false, &int()).unwrap();
    assert_eq!(run(&v, 1), None, "three runs");
    assert_eq!((run(&c, 0), run(&Layout::contiguous(0, &int()).unwrap(), 4)), (None, None), "no data");
    for (l, n) in [(&c, 3), (&one, 1)] {
        assert_eq!(run(l, n).into_iter().collect::<Vec<_>>(), runs(l, n), "as runs gives them");
    }
}

#[test]
fn structs_are_padded_to_their_alignment_unless_an_ub_marker_says_otherwise() {
    let (c, d) = (Layout::basic(Basic::Char), Layout::basic(Basic::Double));
    let s = Layout::structure(&[1, 1], &[0, 8], &[&c, &d]).unwrap();
    assert_eq!((s.size(), s.extent(), s.true_bounds()), (9, 16, (0, 16)));
    let s = Layout::structure(&[1, 1], &[0, 8], &[&d, &c]).unwrap();
    assert_eq!((s.size(), s.extent(), s.true_bounds()), (9, 16, (0, 9)));
    let (lbm, ubm) = (Layout::lb_marker(), Layout::ub_marker());
    let m = Layout::structure(&[1, 1, 1], &[-4, 0, 24], &[&lbm, &d, &ubm]).unwrap();
    assert_eq!((m.lb(), m.ub(), m.extent(), m.true_bounds()), (-4, 24, 28, (0, 8)));
    // Markers win in every type built on top.
    let v = Layout::contiguous(2, &m).unwrap();
    assert_eq!((v.lb(), v.ub(), runs(&v, 1)), (-4, 52, vec![(0, 8), (28, 8)]));
    let r = Layout::resized(&int(), -2, 10).unwrap();
    assert_eq!((r.lb(), r.extent(), runs(&r, 2)), (-2, 10, vec![(0, 4), (10, 4)]));
    let s2 = Layout::structure(&[1, 1], &[0, 100], &[&r, &c]).unwrap();
    assert_eq!((s2.lb(), s2.ub()), (-2, 8), "a resized member's bounds are markers: they win over the data's");
}

#[test]
fn elements_count_basic_items_and_refuse_a_partial_one() {
    let (c, d) = (Layout::basic(Basic::Char), Layout::basic(Basic::Double));
    let s = Layout::structure(&[2, 1], &[0, 8], &[&c, &d]).unwrap();
    assert_eq!(s.size(), 10);
    assert_eq!(s.elements(20), Some(6));
    assert_eq!(s.elements(21), Some(7));
    assert_eq!(s.elements(22), Some(8));
    assert_eq!(s.elements(25), None, "ends inside the double");
    assert_eq!(s.elements(30), Some(9));
    assert_eq!(s.homogeneous(), None);
    assert_eq!(Layout::contiguous(3, &d).unwrap().homogeneous(), Some(Basic::Double));
}

#[test]
fn pack_and_unpack_move_exactly_the_runs_and_stay_in_the_buffer() {
    let v = Layout::vector(2, 1, 2, false, &int()).unwrap();
    let buf: Vec<u8> = (0..32).collect();
    let mut out = Vec::new();
    pack(&v, &buf, 0, 2, &mut out).unwrap();
    assert_eq!(out, [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23]);
    let mut back = vec![0u8; 32];
    assert_eq!(unpack(&v, &out[..10], &mut back, 0, 2).unwrap(), 10, "a short message fills what it can");
    assert_eq!(&back[8..12], &[8, 9, 10, 11]);
    assert_eq!(&back[12..14], &[12, 13]);
    assert!(pack(&v, &buf[..20], 0, 2, &mut out).is_err(), "the last run is outside");
    let neg = Layout::vector(2, 1, -8, true, &int()).unwrap();
    assert!(pack(&neg, &buf, 0, 1, &mut out).is_err(), "a negative offset before the buffer");
    out.clear();
    pack(&neg, &buf, 8, 1, &mut out).unwrap();
    assert_eq!(out, [8, 9, 10, 11, 0, 1, 2, 3]);
    assert!(Layout::vector(1 << 30, 1 << 30, 1, false, &int()).is_err(), "too large");
}

/// A type tree for the property test.
#[derive(Debug, Clone)]
enum Tree {
    Basic(Basic),
    Contig(i32, Box<Tree>),
    Vector(i32, i32, i64, bool, Box<Tree>),
    Indexed(Vec<(i32, i64)>, bool, Box<Tree>),
    Struct(Vec<(i32, i64, Tree)>),
    Resized(i64, i64, Box<Tree>),
}

fn arb_tree() -> impl Strategy<Value = Tree> {
    let leaf = prop::sample::select(vec![Basic::Char, Basic::Short, Basic::Int, Basic::Double]).prop_map(Tree::Basic);
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            (0..4i32, inner.clone()).prop_map(|(n, t)| Tree::Contig(n, Box::new(t))),
            (0..3i32, 0..3i32, -3..4i64, any::<bool>(), inner.clone()).prop_map(|(n, b, s, h, t)| Tree::Vector(
                n,
                b,
                s,
                h,
                Box::new(t)
            )),
            (prop::collection::vec((0..3i32, -4..6i64), 0..3), any::<bool>(), inner.clone())
                .prop_map(|(v, h, t)| Tree::Indexed(v, h, Box::new(t))),
            prop::collection::vec((0..3i32, -8..24i64, inner.clone()), 1..3).prop_map(Tree::Struct),
            (-4..4i64, 0..24i64, inner).prop_map(|(lb, e, t)| Tree::Resized(lb, e, Box::new(t))),
        ]
    })
}

fn build(t: &Tree) -> Layout {
    match t {
        Tree::Basic(b) => Layout::basic(*b),
        Tree::Contig(n, t) => Layout::contiguous(*n, &build(t)).unwrap(),
        Tree::Vector(n, b, s, h, t) => Layout::vector(*n, *b, *s, *h, &build(t)).unwrap(),
        Tree::Indexed(v, h, t) => {
            let (bl, d): (Vec<i32>, Vec<i64>) = v.iter().copied().unzip();
            Layout::indexed(&bl, &d, *h, &build(t)).unwrap()
        }
        Tree::Struct(v) => {
            let ls: Vec<Layout> = v.iter().map(|(_, _, t)| build(t)).collect();
            let refs: Vec<&Layout> = ls.iter().collect();
            let bl: Vec<i32> = v.iter().map(|x| x.0).collect();
            let d: Vec<i64> = v.iter().map(|x| x.1).collect();
            Layout::structure(&bl, &d, &refs).unwrap()
        }
        Tree::Resized(lb, e, t) => Layout::resized(&build(t), *lb, *e).unwrap(),
    }
}

/// The naive type map: every basic element's (offset, size), in order.
fn typemap(t: &Tree) -> Vec<(i64, u64)> {
    let l = build(t);
    let copies = |n: u64, disp: i64, sub: &Tree| {
        let m = typemap(sub);
        let e = build(sub).extent();
        (0..n)
            .flat_map(move |i| {
                m.clone().into_iter().map(move |(o, s)| (disp + i as i64 * e, o, s)).map(|(d, o, s)| (d + o, s))
            })
            .collect::<Vec<_>>()
    };
    let _ = l;
    match t {
        Tree::Basic(b) => vec![(0, b.size())],
        Tree::Contig(n, s) => copies(*n as u64, 0, s),
        Tree::Vector(n, b, st, h, s) => {
            let step = if *h { *st } else { st * build(s).extent() };
            (0..*n as i64).flat_map(|i| copies(*b as u64, i * step, s)).collect()
        }
        Tree::Indexed(v, h, s) => {
            v.iter().flat_map(|&(b, d)| copies(b as u64, if *h { d } else { d * build(s).extent() }, s)).collect()
        }
        Tree::Struct(v) => v.iter().flat_map(|(b, d, s)| copies(*b as u64, *d, s)).collect(),
        Tree::Resized(_, _, s) => typemap(s),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Packing follows the naive type map byte for byte; unpacking puts every
    /// byte back where it came from; size, true bounds and element counts agree.
    #[test]
    fn layouts_agree_with_the_naive_type_map(t in arb_tree(), count in 0..3u64) {
        let l = build(&t);
        let map = typemap(&t);
        prop_assert_eq!(l.size(), map.iter().map(|m| m.1).sum::<u64>());
        if l.size() > 0 {
            let lo = map.iter().map(|m| m.0).min().unwrap();
            let hi = map.iter().map(|m| m.0 + m.1 as i64).max().unwrap();
            prop_assert_eq!(l.true_bounds(), (lo, hi));
        }
        let (lo, hi) = l.span(count).unwrap();
        let base = (-lo).max(0) as usize;
        let len = base + hi.max(0) as usize + 1;
        let buf: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut packed = Vec::new();
        pack(&l, &buf, base, count, &mut packed).unwrap();
        let mut want = Vec::new();
        for i in 0..count as i64 {
            for &(o, s) in &map {
                let at = (base as i64 + i * l.extent() + o) as usize;
                want.extend_from_slice(&buf[at..at + s as usize]);
            }
        }
        prop_assert_eq!(&packed, &want);
        let mut back = vec![0u8; len];
        prop_assert_eq!(unpack(&l, &packed, &mut back, base, count).unwrap(), packed.len());
        for i in 0..count as i64 {
            for &(o, s) in &map {
                let at = (base as i64 + i * l.extent() + o) as usize;
                prop_assert_eq!(&back[at..at + s as usize], &buf[at..at + s as usize]);
            }
        }
        let basics = map.len() as u64 * count;
        prop_assert_eq!(l.elements(l.size() * count), Some(basics));
    }
}

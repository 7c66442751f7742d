//! The geometry: the split tree, containment, adjacency and distance on the torus.

use proptest::prelude::*;

use super::super::zone::{Point, Zone, volumes_sum_to_one};
use crate::id::Id;

fn z(depth: usize, lo: &[u32]) -> Zone {
    Zone::new(depth, lo).unwrap()
}

#[test]
fn splits_go_round_the_dimensions_longest_side_first() {
    let root = Zone::root(3);
    let (a, b) = root.halves().unwrap();
    assert_eq!((a.split_dim(), a.side_bits(0), a.side_bits(1)), (1, 31, 32));
    assert_eq!(b.lo(), &[1 << 31, 0, 0]);
    let (c, d) = b.halves().unwrap();
    assert_eq!(c.lo(), &[1 << 31, 0, 0]);
    assert_eq!(d.lo(), &[1 << 31, 1 << 31, 0]);
    let (_, f) = d.halves().unwrap();
    assert_eq!(f.lo(), &[1 << 31, 1 << 31, 1 << 31]);
    // Four splits: dimension 0 is halved again.
    let (_, h) = f.halves().unwrap();
    assert_eq!(h.lo(), &[3 << 30, 1 << 31, 1 << 31]);
    assert_eq!((h.side_bits(0), h.side_bits(1), h.side_bits(2)), (30, 31, 31));
    for x in [a, b, c, d, f, h] {
        let (p, q) = x.halves().unwrap();
        assert_eq!(p.parent(), Some(x));
        assert_eq!(q.parent(), Some(x));
        assert_eq!(p.sibling(), Some(q));
        assert_eq!(q.sibling(), Some(p));
        assert!(x.covers(&p) && x.covers(&q) && !p.intersects(&q));
        assert!(p.abuts(&q), "halves abut");
    }
    assert_eq!(root.parent(), None);
    assert_eq!(root.sibling(), None);
}

#[test]
fn new_refuses_what_is_no_zone() {
    assert!(Zone::new(1, &[1 << 31, 0]).is_some());
    assert!(Zone::new(1, &[1 << 30, 0]).is_none(), "corner not aligned to the side");
    assert!(Zone::new(65, &[0, 0]).is_none(), "deeper than 32 per dimension");
    assert!(Zone::new(0, &[]).is_none());
    assert!(Zone::new(0, &[0; 9]).is_none());
    assert!(Zone::new(64, &[7, 0xffff_ffff]).is_some(), "the finest grain is one point");
    assert_eq!(Zone::new(64, &[7, 9]).unwrap().halves(), None);
}

#[test]
fn neighbours_abut_across_the_wrap() {
    // d = 1, four quarters: each abuts the next, the last the first.
    let q: Vec<Zone> = (0..4).map(|i| z(2, &[i << 30])).collect();
    for i in 0..4 {
        assert!(q[i].abuts(&q[(i + 1) % 4]), "{:?} {:?}", q[i], q[(i + 1) % 4]);
        assert!(!q[i].abuts(&q[(i + 2) % 4]));
        assert!(!q[i].abuts(&q[i]), "a zone is not its own neighbour");
    }
    // d = 2: corner contact is not adjacency; the wrap is.
    let a = z(2, &[0, 0]);
    let d = z(2, &[1 << 31, 1 << 31]);
    assert!(!a.abuts(&d), "diagonal quarters only touch at corners");
    let b = z(2, &[1 << 31, 0]);
    assert!(a.abuts(&b));
    // A zone spanning dimension 1 abuts both sides of a thin one.
    let left = z(1, &[0, 0]);
    let right_top = z(2, &[1 << 31, 1 << 31]);
    assert!(left.abuts(&right_top));
    // Overlapping zones are not neighbours.
    assert!(!left.abuts(&a));
}

#[test]
fn distance_wraps_around_the_torus() {
    let zone = z(2, &[0]); // [0, 2^30)
    let p = |x: u32| Point::new(&[x]).unwrap();
    assert_eq!(zone.dist2(&p(5)), 0);
    assert_eq!(zone.dist2(&p(1 << 30)), 1);
    assert_eq!(zone.dist2(&p(u32::MAX)), 1, "one step down from 0 wraps to the top");
    assert_eq!(zone.dist2(&p(u32::MAX - 9)), 100);
    let two = z(0, &[0, 0]).halves().unwrap().1; // [2^31, 2^32) x all
    assert_eq!(two.dist2(&Point::new(&[3, 77]).unwrap()), 16);
}

#[test]
fn keys_map_to_sliced_digests() {
    let key = Id::hash("svc");
    let b = key.as_bytes();
    let word = |i: usize| u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
    let p2 = Point::of_key(key, 2);
    assert_eq!(p2.coords(), &[word(0), word(1)]);
    let p5 = Point::of_key(key, 5);
    assert_eq!(p5.coords(), &(0..5).map(word).collect::<Vec<_>>()[..]);
    // Eight dimensions: 20 bits each, left-aligned.
    let p8 = Point::of_key(key, 8);
    assert_eq!(p8.coords()[0], word(0) & 0xffff_f000);
    assert_eq!(p8.coords()[1], (word(0) << 20) | ((word(1) >> 12) & 0x000f_f000));
}

#[test]
fn minus_leaves_the_siblings_on_the_way_down() {
    let root = Zone::root(2);
    let p = Point::new(&[12345, 999]).unwrap();
    let deep = Zone::containing(&p, 5);
    let rest = root.minus(&deep);
    assert_eq!(rest.len(), 5);
    let mut all = rest.clone();
    all.push(deep);
    assert!(volumes_sum_to_one(&all));
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert!(!a.intersects(b));
        }
    }
    assert!(root.minus(&root).is_empty());
}

proptest! {
    #[test]
    fn containing_holds_the_point_and_nests(coords in proptest::collection::vec(any::<u32>(), 1..=8), depth in 0usize..80) {
        let p = Point::new(&coords).unwrap();
        let depth = depth.min(32 * coords.len());
        let zone = Zone::containing(&p, depth);
        prop_assert!(zone.contains(&p));
        prop_assert_eq!(zone.dims(), coords.len());
        if let Some(parent) = zone.parent() {
            prop_assert!(parent.covers(&zone));
            prop_assert_eq!(Zone::containing(&p, depth - 1), parent);
        }
        prop_assert_eq!(zone.dist2(&p), 0);
    }

    #[test]
    fn faces_find_exactly_the_abutting_halves(coords in proptest::collection::vec(any::<u32>(), 1..=4), depth in 1usize..12) {
        // The zone at `depth` holding p and every zone of the same depth: those
        // meeting one of its faces are exactly those it abuts.
        let p = Point::new(&coords).unwrap();
        let me = Zone::containing(&p, depth);
        let all: Vec<Zone> = (0..1u32 << depth).map(|i| {
            let mut z = Zone::root(coords.len());
            for bit in (0..depth).rev() {
                let (a, b) = z.halves().unwrap();
                z = if i >> bit & 1 == 0 { a } else { b };
            }
            z
        }).collect();
        for other in all.iter().filter(|z| **z != me) {
            let by_face = (0..coords.len()).any(|k| [false, true].iter().any(|&up| me.face(k, up).is_some_and(|r| other.meets(&r))));
            prop_assert_eq!(by_face, me.abuts(other), "{:?} vs {:?}", me, other);
        }
    }
}

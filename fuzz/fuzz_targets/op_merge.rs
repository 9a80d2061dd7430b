//! Near-data operations against a single pass: arbitrary bytes are the object, cut into
//! runs at arbitrary places, folded and merged in an arbitrary grouping (as drives and a
//! coordinator would), and the answer must be the one a single run over the whole object
//! gives, exactly (statistics' float mean and variance within 1e-9 relative), or, for CSV
//! whose quoted fields cross a run edge, the one an in-order fold gives. Also feeds
//! the first bytes as an operation's JSON, which must parse or be refused, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oed_ops::op::{Op, Plan, results_agree};

// Not compressibility or dedup: their answers depend on the runs by design (a frame, and
// a fresh content-defined chunking, per run); their merges are tested in oed-ops.
const OPS: [&str; 10] = [
    r#"{"op":"stats","format":"csv","column":1,"header":true,"quantiles":[0.5]}"#,
    r#"{"op":"stats","format":"text","quantiles":[0,0.9,1],"accuracy":0.05}"#,
    r#"{"op":"stats","format":"csv","column":0,"delimiter":";"}"#,
    r#"{"op":"checksum","algorithm":"crc32c"}"#,
    r#"{"op":"checksum","algorithm":"crc64nvme"}"#,
    r#"{"op":"checksum","algorithm":"blake3"}"#,
    r#"{"op":"stats","format":"u16le","edges":[0,100,1000,65535]}"#,
    r#"{"op":"stats","format":"u8"}"#,
    r#"{"op":"grep","pattern":"a\nb","lines":3}"#,
    r#"{"op":"grep","pattern":"[ab]+c?","regex":true,"lines":5}"#,
];

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else { return };
    // Untrusted operation text: parse or refuse.
    if let Ok(text) = std::str::from_utf8(&rest[..rest.len().min(64)]) {
        if let Ok(op) = serde_json::from_str::<Op>(text) {
            let _ = Plan::new(op, 100, 4096);
        }
    }
    let op: Op = serde_json::from_str(OPS[usize::from(head) % OPS.len()]).expect("valid");
    // Up to 8 cut points from the next bytes, then the object.
    let (cuts, object) = rest.split_at(rest.len().min(8));
    let len = object.len();
    let w = if matches!(op, Op::Stats(_)) { 2 } else { 1 };
    let object = &object[..len / w * w];
    let len = object.len();
    let Ok(plan) = Plan::new(op, len as u64, 1024) else { return };
    // One run over the whole object answers, or refuses the object (a CSV column no
    // record has, a record too long): then so must the runs.
    let Ok(one) = plan.run(0, object).and_then(|p| plan.finish(&p)) else {
        return;
    };
    let mut bounds: Vec<usize> = cuts.iter().map(|&c| usize::from(c) * len / 256).collect();
    bounds.extend([0, len]);
    bounds.sort_unstable();
    bounds.dedup();
    let parts: Vec<_> = bounds
        .windows(2)
        .map(|r| plan.run(r[0] as u64, &object[r[0]..r[1]]).expect("a run folds"))
        .collect();
    // Merge the second half first, then the first half onto it, as a coordinator might
    // receive them, but always in object order.
    let mid = parts.len() / 2;
    let fold = |ps: &[oed_ops::op::Partial]| {
        ps.iter()
            .cloned()
            .try_fold(plan.empty().expect("splits"), |a, p| plan.merge(a, p))
            .expect("merges")
    };
    let (left, right) = (fold(&parts[..mid]), fold(&parts[mid..]));
    let merged = match plan.merge(left, right).and_then(|p| plan.finish(&p)) {
        Ok(m) => m,
        // A quoted CSV field across a run edge: the answer comes from a fold in order,
        // over the runs as they come.
        Err(oed_ops::Error::InOrder(_)) => {
            let mut seq = plan.in_order().expect("an in-order fold");
            for r in bounds.windows(2) {
                seq.update(&object[r[0]..r[1]]).expect("folds");
            }
            seq.finish().expect("finishes in order")
        }
        Err(e) => panic!("the runs refused what one run answered: {e}"),
    };
    assert!(results_agree(&one, &merged), "{one}\n{merged}");
});

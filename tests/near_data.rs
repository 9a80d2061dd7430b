//! Near-data operations on a real cluster: six drives (k = 4, m = 2) serving on 127.0.0.1
//! in this process, each with its own store on disk. Every answer is checked against the
//! same computation done here over the bytes the test wrote, with independent
//! implementations (crc32c, crc-fast, blake3, sha2, plain two-pass statistics): healthy,
//! with a data drive stopped, with a byte flipped in a shard file, for a multipart object
//! whose parts are not aligned to anything, and with requests the object cannot take.

// Test data and reference statistics are small; their floats are exact.
#![allow(clippy::cast_precision_loss)]
#![allow(clippy::too_many_lines)] // Each test tells one story, healthy to degraded.

use std::sync::Arc;

use base64::Engine as _;
use oed_cluster::Cluster;
use oed_cluster::compute::coordinator::Outcome;
use oed_cluster::write::NewObject;
use oed_model::record::{ObjectRecord, PartRef};
use oed_ops::op::Op;
use oed_tests::{LocalDrive, bytes, files_under, put_object};
use sha2::Digest as _;

const K: usize = 4;
const M: usize = 2;
const CHUNK: usize = 4096;

/// `n` doubles far from zero, spread out: a naive sum of squares would lose them.
fn doubles(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| (1e9 + ((i * 7919) % 1000) as f64 / 8.0).to_le_bytes())
        .collect()
}

async fn run(c: &Arc<Cluster>, rec: &ObjectRecord, op: &str) -> oed_model::Result<Outcome> {
    let op: Op = serde_json::from_str(op).expect("a valid operation");
    c.run_op(rec, op).await
}

/// `run` where every drive is up and every shard whole: each drive answers its part
/// (a part the coordinator had to compute itself would hide a drive's failure).
async fn run_healthy(c: &Arc<Cluster>, rec: &ObjectRecord, op: &str) -> Outcome {
    let got = run(c, rec, op).await.unwrap();
    assert!(
        got.cost.drives.iter().all(|d| d.failed.is_none()) && got.cost.rebuilt_stripes == 0,
        "{op}: {:?}",
        got.cost
    );
    got
}

/// What each checksum must be for `data`, as S3 headers carry them (base64).
fn checksums(data: &[u8]) -> [(&'static str, String); 4] {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let crc64 = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, data);
    [
        ("crc32c", b64(&crc32c::crc32c(data).to_be_bytes())),
        ("crc64nvme", b64(&crc64.to_be_bytes())),
        ("blake3", b64(blake3::hash(data).as_bytes())),
        ("sha256", b64(&sha2::Sha256::digest(data))),
    ]
}

/// Every checksum and the statistics of `rec` answer as computed here over `data`.
async fn expect_exact(c: &Arc<Cluster>, rec: &ObjectRecord, data: &[u8]) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for (algorithm, want) in checksums(data) {
        let got = run(
            c,
            rec,
            &format!(r#"{{"op":"checksum","algorithm":"{algorithm}"}}"#),
        )
        .await
        .unwrap();
        assert_eq!(got.result["base64"], want, "{algorithm}");
        outcomes.push(got);
    }
    let values: Vec<f64> = data
        .chunks(8)
        .map(|r| f64::from_le_bytes(r.try_into().unwrap()))
        .collect();
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let edges = "[1e9, 1000000050, 1000000125]";
    let got = run(
        c,
        rec,
        &format!(r#"{{"op":"stats","format":"f64le","edges":{edges}}}"#),
    )
    .await
    .unwrap();
    let r = &got.result;
    assert_eq!(r["count"], values.len());
    assert!((r["mean"].as_f64().unwrap() - mean).abs() < 1e-6, "{r}");
    assert!(
        (r["variance"].as_f64().unwrap() - var).abs() < 1e-6 * var,
        "{r}"
    );
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(
        (r["min"].as_f64(), r["max"].as_f64()),
        (Some(min), Some(max))
    );
    let low = values.iter().filter(|&&v| v < 1_000_000_050.0).count();
    assert_eq!(r["histogram"]["counts"][0], low);
    assert_eq!(r["histogram"]["counts"][1], values.len() - low);
    outcomes.push(got);
    outcomes
}

use oed_tests::runtime as rt;

#[test]
fn answers_are_exact_healthy_degraded_and_with_bit_rot() {
    let root = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let mut drives: Vec<LocalDrive> = oed_tests::local_cluster(root.path(), K, M, CHUNK).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        // 60 full stripes and a short last one whose chunks are not 4 KiB.
        let data = doubles((60 * K * CHUNK + 5000) / 8);
        let rec = put_object(&c, "bkt", "log", &data).await;

        // Healthy: exact, no parity, and little crosses the network for statistics.
        let healthy = expect_exact(&c, &rec, &data).await;
        let stats = healthy.last().unwrap();
        assert!(!stats.cost.parity_used && stats.cost.rebuilt_stripes == 0);
        assert_eq!(stats.cost.drives.len(), K);
        // Energy from the drives' meters (a model here, and labelled so).
        assert!(stats.cost.energy_method.is_some(), "{:?}", stats.cost);
        assert!(stats.cost.energy_joules.is_some_and(|j| j >= 0.0));
        assert!(stats.cost.drive_bytes_read >= data.len() as u64);
        assert!(
            stats.cost.network_bytes * 100 < data.len() as u64,
            "{} bytes over the network for {} of data",
            stats.cost.network_bytes,
            data.len()
        );
        // SHA-256 streams the object through the coordinator, and says so.
        let sha = &healthy[3];
        assert!(sha.cost.coordinator_bytes >= data.len() as u64);
        // CRC32C from the CRCs stored with the chunks: the same answer, 4 bytes a chunk
        // read instead of the chunks (but the last stripe's padded ones).
        let stored = r#"{"op":"checksum","algorithm":"crc32c","stored":true}"#;
        let from_stored = run_healthy(&c, &rec, stored).await;
        assert_eq!(from_stored.result["base64"], checksums(&data)[0].1);
        assert!(
            from_stored.cost.drive_bytes_read < (K * (64 * 4 + CHUNK)) as u64,
            "{:?}",
            from_stored.cost
        );

        // A byte flipped in data shard 2's file: still exact, from parity.
        let holder = |shard: usize| {
            drives
                .iter()
                .position(|d| d.id == rec.drives[shard])
                .unwrap()
        };
        let files = files_under(&drives[holder(2)].dir.join("shards"));
        let mut on_disk = std::fs::read(&files[0]).unwrap();
        on_disk[64 + 7 * (CHUNK + 4) + 100] ^= 0x10; // stripe 7
        std::fs::write(&files[0], &on_disk).unwrap();
        let rot = expect_exact(&c, &rec, &data).await;
        assert!(rot.iter().all(|o| o.cost.parity_used), "parity not used");
        // The stored CRCs still say what was written: the same answer, and the rotten
        // chunk is not read (a read or a scrub finds it).
        let got = run(&c, &rec, stored).await.unwrap();
        assert_eq!(got.result["base64"], checksums(&data)[0].1);
        assert!(!got.cost.parity_used);
        let crc = &rot[0].cost;
        let shard2 = crc.drives.iter().find(|d| d.shard == 2).unwrap();
        assert_eq!(shard2.stripes_done, 7, "{crc:?}");
        assert!(crc.rebuilt_stripes >= 1);

        // The drive of data shard 1 stopped, with another drive coordinating: still exact.
        let down = holder(1);
        let c = drives[usize::from(down == 0)].cluster.clone();
        drives.remove(down).stop().await;
        let degraded = expect_exact(&c, &rec, &data).await;
        let got = run(&c, &rec, stored).await.unwrap();
        assert_eq!(got.result["base64"], checksums(&data)[0].1);
        assert!(got.cost.parity_used);
        let cost = &degraded[0].cost;
        assert!(cost.parity_used);
        assert!(
            cost.drives
                .iter()
                .any(|d| d.shard == 1 && d.failed.is_some()),
            "{cost:?}"
        );
        for d in drives {
            d.stop().await;
        }
    });
}

#[test]
fn a_multipart_object_is_one_object_to_its_operations() {
    let root = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let drives = oed_tests::local_cluster(root.path(), K, M, CHUNK).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        // Three parts whose sizes are whole records but align with nothing else.
        let data = doubles(9_000);
        let cuts = [0, 8 * 3001, 8 * 7777, data.len()];
        let mut parts = Vec::new();
        for (n, w) in cuts.windows(2).enumerate() {
            let key = format!("\u{1}p/test/{:05}", n + 1);
            let rec = put_object(&c, "bkt", &key, &data[w[0]..w[1]]).await;
            parts.push(PartRef::of(n as u32 + 1, &rec));
        }
        let obj = NewObject {
            bucket: "bkt".into(),
            key: "whole".into(),
            parts,
            etag: Some("e-3".into()),
            ..NewObject::default()
        };
        let rec = c
            .put_object(obj, futures_util::stream::empty())
            .await
            .unwrap()
            .record;
        assert_eq!(rec.object_size(), data.len() as u64);
        expect_exact(&c, &rec, &data).await;
        // A range across both part edges.
        let r = 8 * 2990 + 3..8 * 7790 + 5;
        let op: Op = serde_json::from_str(r#"{"op":"checksum","algorithm":"crc64nvme"}"#).unwrap();
        let got = c
            .run_op_range(&rec, op, Some(r.start as u64..r.end as u64))
            .await
            .unwrap();
        assert_eq!(got.result["base64"], checksums(&data[r])[1].1);
        for d in drives {
            d.stop().await;
        }
    });
}

#[test]
fn operations_the_object_cannot_take_are_refused_and_change_nothing() {
    let root = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let drives = oed_tests::local_cluster(root.path(), K, M, CHUNK).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        let data = bytes(3 * K * CHUNK + 3, 5);
        let rec = put_object(&c, "bkt", "odd", &data).await;
        for (op, says) in [
            (r#"{"op":"stats","format":"f64le"}"#, "8-byte f64le records"),
            (r#"{"op":"stats","format":"u8","edges":[3,2]}"#, "ascending"),
        ] {
            let e = run(&c, &rec, op).await.unwrap_err();
            assert!(
                matches!(e, oed_model::Error::BadRequest(_)) && e.to_string().contains(says),
                "{op}: {e}"
            );
        }
        // The object is still whole, and bytes work.
        let got = run(&c, &rec, r#"{"op":"stats","format":"u8"}"#)
            .await
            .unwrap();
        assert_eq!(got.result["count"], data.len());
        let sum: u32 = data.iter().map(|&b| u32::from(b)).sum();
        assert_eq!(got.result["sum"], f64::from(sum));
        for d in drives {
            d.stop().await;
        }
    });
}

/// A log whose lines cross chunk and stripe edges everywhere: `n` lines of varying length.
fn log(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let level = ["INFO", "WARN", "ERROR disk", "DEBUG"][i % 4];
        let pad = "x".repeat((i * 37) % 300);
        out.extend_from_slice(format!("{i} {level} {pad}\n").as_bytes());
    }
    out.extend_from_slice(b"last line without a newline ERROR disk");
    out
}

#[test]
fn grep_counts_lines_across_chunk_edges_exactly() {
    let root = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let mut drives = oed_tests::local_cluster(root.path(), K, M, CHUNK).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        let data = log(2000);
        let rec = put_object(&c, "bkt", "app.log", &data).await;
        let text = String::from_utf8(data.clone()).unwrap();
        let lines: Vec<&str> = text.split_terminator('\n').collect();
        let want_errors: Vec<(usize, &str)> = lines
            .iter()
            .scan(0usize, |at, l| {
                let start = *at;
                *at += l.len() + 1;
                Some((start, *l))
            })
            .filter(|(_, l)| l.contains("ERROR disk"))
            .collect();
        let check = |got: &Outcome| {
            let r = &got.result;
            assert_eq!(r["lines"], lines.len(), "{r}");
            assert_eq!(r["matches"], want_errors.len());
            let kept: Vec<(u64, String)> = r["matched"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    (
                        l["offset"].as_u64().unwrap(),
                        l["text"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            let want: Vec<(u64, String)> = want_errors
                .iter()
                .take(25)
                .map(|(o, l)| (*o as u64, (*l).to_owned()))
                .collect();
            assert_eq!(kept, want);
        };
        let op = r#"{"op":"grep","pattern":"ERROR disk","lines":25}"#;
        let healthy = run_healthy(&c, &rec, op).await;
        check(&healthy);
        // 4 KiB chunks and a small object here: the lines cut at chunk edges and each
        // drive's first 25 matching lines travel, about a tenth of the object.
        assert!(
            healthy.cost.network_bytes * 5 < data.len() as u64,
            "{:?}",
            healthy.cost
        );
        // The same as a regular expression, and with a data drive stopped.
        let re = r#"{"op":"grep","pattern":"ERROR d[i]sk","regex":true,"lines":25}"#;
        let holder = drives.iter().position(|d| d.id == rec.drives[2]).unwrap();
        let c = drives[usize::from(holder == 0)].cluster.clone();
        drives.remove(holder).stop().await;
        let degraded = run(&c, &rec, re).await.unwrap();
        check(&degraded);
        assert!(degraded.cost.parity_used);
        // A regular expression that does not parse is refused.
        let e = run(&c, &rec, r#"{"op":"grep","pattern":"(","regex":true}"#)
            .await
            .unwrap_err();
        assert!(matches!(e, oed_model::Error::BadRequest(_)), "{e}");
        for d in drives {
            d.stop().await;
        }
    });
}

/// A CSV of `n` rows whose third column is `i * 0.5 - 100`; every fifth row has a long
/// quoted note (with commas, doubled quotes and newlines) that often crosses a 4 KiB
/// chunk edge when `long_notes`. Also the values, for the reference.
fn csv(n: usize, long_notes: bool) -> (Vec<u8>, Vec<f64>) {
    let mut out = b"id,note,value\n".to_vec();
    let mut values = Vec::new();
    for i in 0..n {
        let v = i as f64 * 0.5 - 100.0;
        let note = if long_notes && i % 5 == 0 {
            format!("\"said \"\"hi\"\",\n{}\"", "y,".repeat(200 + i % 97))
        } else {
            format!("n{i}")
        };
        out.extend_from_slice(format!("{i},{note},{v}\n").as_bytes());
        values.push(v);
    }
    (out, values)
}

#[test]
fn text_and_csv_statistics_and_quantiles_on_a_cluster() {
    let root = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let mut drives = oed_tests::local_cluster(root.path(), K, M, CHUNK).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        let check = |r: &serde_json::Value, values: &[f64]| {
            assert_eq!(r["count"], values.len(), "{r}");
            assert_eq!(r["sum"].as_f64(), Some(values.iter().sum::<f64>()), "{r}");
            assert_eq!(r["invalid"], 0);
            assert_eq!(r["missing"], 0);
        };
        let op = r#"{"op":"stats","format":"csv","column":2,"header":true}"#;
        // Plain CSV: the drives answer, little crosses the network.
        let (plain, values) = csv(3000, false);
        let rec = put_object(&c, "bkt", "plain.csv", &plain).await;
        let got = run_healthy(&c, &rec, op).await;
        check(&got.result, &values);
        assert!(
            !got.cost.in_order && got.cost.coordinator_bytes == 0,
            "{:?}",
            got.cost
        );
        // Quoted notes across chunk edges: the object is read in order, still exact.
        let (quoted, qvalues) = csv(600, true);
        let qrec = put_object(&c, "bkt", "quoted.csv", &quoted).await;
        let got = run_healthy(&c, &qrec, op).await;
        check(&got.result, &qvalues);
        assert!(got.cost.in_order && got.cost.coordinator_bytes >= quoted.len() as u64);
        // A column no row has is refused.
        let e = run(
            &c,
            &rec,
            r#"{"op":"stats","format":"csv","column":9,"header":true}"#,
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("column 9 does not exist"), "{e}");

        // One number per line, with quantiles within their stated accuracy.
        let lines: Vec<u8> = values
            .iter()
            .flat_map(|v| format!("{v}\n").into_bytes())
            .collect();
        let trec = put_object(&c, "bkt", "values.txt", &lines).await;
        let q = r#"{"op":"stats","format":"text","quantiles":[0,0.5,0.9,1],"accuracy":0.01}"#;
        let got = run_healthy(&c, &trec, q).await;
        assert_eq!(got.result["count"], values.len());
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        for q in got.result["quantiles"]["values"].as_array().unwrap() {
            let at = [0.0, 0.5, 0.9, 1.0]
                .iter()
                .position(|&x| Some(x) == q["q"].as_f64())
                .unwrap();
            let rank = [
                0,
                (sorted.len() - 1) / 2,
                (sorted.len() - 1) * 9 / 10,
                sorted.len() - 1,
            ][at];
            let (want, got) = (sorted[rank], q["value"].as_f64().unwrap());
            assert!(
                (got - want).abs() <= 0.01 * want.abs() + 1e-9,
                "{q}: want {want}"
            );
        }

        // A histogram of four bins between the extremes, which a first pass finds.
        let got = run_healthy(&c, &trec, r#"{"op":"stats","format":"text","bins":4}"#).await;
        let h = &got.result["histogram"];
        assert_eq!(
            h["edges"],
            serde_json::json!([-100.0, 274.875, 649.75, 1024.625, 1399.5])
        );
        assert_eq!(h["counts"], serde_json::json!([750, 750, 750, 750]), "{h}");
        assert_eq!(
            (got.cost.passes, got.cost.object_bytes),
            (2, lines.len() as u64)
        );

        // With a data drive stopped: the same answers, from parity.
        let holder = drives.iter().position(|d| d.id == rec.drives[1]).unwrap();
        let c = drives[usize::from(holder == 0)].cluster.clone();
        drives.remove(holder).stop().await;
        let got = run(&c, &rec, op).await.unwrap();
        check(&got.result, &values);
        assert!(got.cost.parity_used);
        let got = run(&c, &qrec, op).await.unwrap();
        check(&got.result, &qvalues);
        for d in drives {
            d.stop().await;
        }
    });
}

/// The object `rec` names, read whole.
async fn read_all(c: &Arc<Cluster>, rec: &ObjectRecord) -> Vec<u8> {
    use futures_util::StreamExt as _;
    let mut body = c.read_object(rec, 0..u64::MAX).await.unwrap();
    let mut out = Vec::new();
    while let Some(piece) = body.next().await {
        out.extend_from_slice(&piece.unwrap());
    }
    out
}

#[test]
fn compressibility_dedup_and_compress_on_a_cluster() {
    let root = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let mut drives = oed_tests::local_cluster(root.path(), K, M, CHUNK).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        let (plain, _) = csv(3000, false);
        let rec = put_object(&c, "bkt", "plain.csv", &plain).await;

        // Compressibility: text shrinks, noise does not; nothing is written.
        let got = run_healthy(
            &c,
            &rec,
            r#"{"op":"compressibility","codec":"zstd","level":1}"#,
        )
        .await;
        assert_eq!(got.result["input_bytes"], plain.len());
        assert!(
            got.result["ratio"].as_f64().unwrap() < 0.6,
            "{}",
            got.result
        );
        let noise = bytes(200_000, 9);
        let nrec = put_object(&c, "bkt", "noise", &noise).await;
        let got = run_healthy(&c, &nrec, r#"{"op":"compressibility","codec":"lz4"}"#).await;
        assert!(
            got.result["ratio"].as_f64().unwrap() > 0.99,
            "{}",
            got.result
        );
        assert!(got.cost.network_bytes < 10_000, "{:?}", got.cost);

        // Compress writes exactly the frames the estimate counted, as a new object that
        // decompresses to the original, in both codecs.
        for (codec, estimate) in [("zstd", r#""level":1"#), ("lz4", "")] {
            let sep = if estimate.is_empty() { "" } else { "," };
            let est = run_healthy(
                &c,
                &rec,
                &format!(r#"{{"op":"compressibility","codec":"{codec}"{sep}{estimate}}}"#),
            )
            .await;
            let target = format!("plain.csv.{codec}");
            let got = run_healthy(
                &c,
                &rec,
                &format!(
                    r#"{{"op":"compress","codec":"{codec}"{sep}{estimate},"target":"{target}"}}"#
                ),
            )
            .await;
            assert_eq!(
                got.result["output_bytes"], est.result["output_bytes"],
                "{}",
                got.result
            );
            let written = c
                .head("bkt", &target)
                .await
                .unwrap()
                .expect("the new object");
            assert_eq!(got.result["output_bytes"], written.object_size());
            let stream = read_all(&c, &written).await;
            let codec = if codec == "zstd" {
                oed_ops::compress::Codec::Zstd
            } else {
                oed_ops::compress::Codec::Lz4
            };
            assert!(oed_ops::compress::decompress(codec, &stream).unwrap() == plain);
            // And decompress, an operation too, writes the original back.
            let name = serde_json::to_value(codec).unwrap();
            let op = format!(r#"{{"op":"decompress","codec":{name},"target":"{target}.out"}}"#);
            let got = run(&c, &written, &op).await.unwrap();
            assert_eq!(got.result["output_bytes"], plain.len());
            let out = c
                .head("bkt", &format!("{target}.out"))
                .await
                .unwrap()
                .unwrap();
            assert!(read_all(&c, &out).await == plain);
        }
        // Not a stream of the codec: refused, nothing written.
        let e = run(&c, &nrec, r#"{"op":"decompress","target":"noise.out"}"#)
            .await
            .unwrap_err();
        assert!(matches!(e, oed_model::Error::BadRequest(_)), "{e}");
        assert!(c.head("bkt", "noise.out").await.unwrap().is_none());

        // Dedup: the same 64 KiB four times is a quarter unique; across two such objects,
        // an eighth.
        let block = bytes(65_536, 3);
        let rep = block.repeat(4);
        let d1 = put_object(&c, "bkt", "rep1", &rep).await;
        let d2 = put_object(&c, "bkt", "rep2", &rep).await;
        let op = r#"{"op":"dedup","average":1024}"#;
        let healthy = run_healthy(&c, &d1, op).await.result;
        let ratio = healthy["unique_ratio"].as_f64().unwrap();
        assert!((0.2..0.35).contains(&ratio), "{healthy}");
        let both = c
            .run_op_many(&[d1.clone(), d2], serde_json::from_str(op).unwrap())
            .await
            .unwrap();
        let ratio = both.result["total"]["unique_ratio"].as_f64().unwrap();
        assert!((0.1..0.2).contains(&ratio), "{}", both.result);

        // With a data drive stopped: the same answers, and compress still writes.
        let holder = drives.iter().position(|d| d.id == d1.drives[0]).unwrap();
        let c = drives[usize::from(holder == 0)].cluster.clone();
        drives.remove(holder).stop().await;
        assert_eq!(run(&c, &d1, op).await.unwrap().result, healthy);
        let got = run(
            &c,
            &d1,
            r#"{"op":"compress","codec":"zstd","target":"rep1.zst"}"#,
        )
        .await
        .unwrap();
        assert!(got.cost.parity_used);
        let written = c.head("bkt", "rep1.zst").await.unwrap().unwrap();
        let stream = read_all(&c, &written).await;
        assert!(
            oed_ops::compress::decompress(oed_ops::compress::Codec::Zstd, &stream).unwrap() == rep
        );
        run(&c, &written, r#"{"op":"decompress","target":"rep1.back"}"#)
            .await
            .unwrap();
        let back = c.head("bkt", "rep1.back").await.unwrap().unwrap();
        assert!(read_all(&c, &back).await == rep);
        for d in drives {
            d.stop().await;
        }
    });
}

/// An operation over a byte range sees those bytes as the whole object: checksums of
/// the range, records counted from its first byte, SHA-256 streamed over it only;
/// healthy and with a data drive stopped (and across the parts of a multipart object, in
/// `a_multipart_object_is_one_object_to_its_operations`).
#[test]
fn operations_over_a_byte_range() {
    let root = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let mut drives = oed_tests::local_cluster(root.path(), K, M, CHUNK).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        let data = doubles((20 * K * CHUNK + 3000) / 8);
        let rec = put_object(&c, "bkt", "log", &data).await;
        let check = |got: &Outcome, r: std::ops::Range<usize>| {
            let want = checksums(&data[r.clone()]);
            assert_eq!(got.result["base64"], want[0].1, "{r:?}");
            assert_eq!(got.cost.object_bytes, (r.end - r.start) as u64);
        };
        let crc = r#"{"op":"checksum","algorithm":"crc32c"}"#;
        for r in [
            0..1,
            5..CHUNK + 7,
            3 * CHUNK..9 * K * CHUNK + 11,
            100..data.len(),
        ] {
            let op: Op = serde_json::from_str(crc).unwrap();
            let got = c
                .run_op_range(&rec, op, Some(r.start as u64..r.end as u64))
                .await
                .unwrap();
            check(&got, r.clone());
            // A drive reads only the stripes the range touches.
            assert!(got.cost.drive_bytes_read <= (r.end - r.start + 2 * K * CHUNK) as u64 * 2);
        }
        // Statistics over whole records of a range that starts on one.
        let r = 8 * 1000..8 * 9000;
        let op: Op = serde_json::from_str(r#"{"op":"stats","format":"f64le"}"#).unwrap();
        let got = c
            .run_op_range(&rec, op, Some(r.start as u64..r.end as u64))
            .await
            .unwrap();
        assert_eq!(got.result["count"], 8000);
        let sum: f64 = data[r]
            .chunks(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .sum();
        assert!((got.result["sum"].as_f64().unwrap() - sum).abs() < 1e-3 * sum.abs());
        // SHA-256 streams only the range.
        let op: Op = serde_json::from_str(r#"{"op":"checksum","algorithm":"sha256"}"#).unwrap();
        let r = 777..50_001;
        let got = c
            .run_op_range(&rec, op, Some(r.start as u64..r.end as u64))
            .await
            .unwrap();
        assert_eq!(got.result["base64"], checksums(&data[r])[3].1);
        // With a data drive stopped.
        let holder = drives.iter().position(|d| d.id == rec.drives[1]).unwrap();
        let c = drives[usize::from(holder == 0)].cluster.clone();
        drives.remove(holder).stop().await;
        let r = CHUNK / 2..7 * K * CHUNK;
        let op: Op = serde_json::from_str(crc).unwrap();
        let got = c
            .run_op_range(&rec, op, Some(r.start as u64..r.end as u64))
            .await
            .unwrap();
        check(&got, r);
        assert!(got.cost.parity_used);
        for d in drives {
            d.stop().await;
        }
    });
}

/// `add`: two objects record by record into a third, through the coordinator, checked
/// against the sum computed here; integers wrap; with a data drive stopped; refusals.
#[test]
fn two_objects_add_into_a_third() {
    let root = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let mut drives = oed_tests::local_cluster(root.path(), K, M, CHUNK).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        let n = (9 * K * CHUNK + 1000) / 8;
        let a = doubles(n);
        let b: Vec<u8> = (0..n)
            .flat_map(|i| (i as f64 * -0.5).to_le_bytes())
            .collect();
        let ra = put_object(&c, "bkt", "a", &a).await;
        put_object(&c, "bkt", "b", &b).await;
        let op = r#"{"op":"add","format":"f64le","with":"b","target":"c"}"#;
        let got = run(&c, &ra, op).await.unwrap();
        assert_eq!(got.result["records"], n);
        assert_eq!(got.cost.coordinator_bytes, 2 * a.len() as u64);
        let rc = c.head("bkt", "c").await.unwrap().expect("the sum");
        let sum = read_all(&c, &rc).await;
        let want: Vec<u8> = a
            .chunks(8)
            .zip(b.chunks(8))
            .flat_map(|(x, y)| {
                (f64::from_le_bytes(x.try_into().unwrap())
                    + f64::from_le_bytes(y.try_into().unwrap()))
                .to_le_bytes()
            })
            .collect();
        assert!(sum == want, "the sum differs");
        // Integers wrap.
        let big = put_object(&c, "bkt", "big", &[0xff; 64]).await;
        put_object(&c, "bkt", "one", &[1; 64]).await;
        run(
            &c,
            &big,
            r#"{"op":"add","format":"u8","with":"one","target":"zero"}"#,
        )
        .await
        .unwrap();
        let rz = c.head("bkt", "zero").await.unwrap().unwrap();
        assert_eq!(read_all(&c, &rz).await, vec![0; 64]);
        // Refusals: no such operand, unequal lengths, not whole records.
        let odd = put_object(&c, "bkt", "odd", &[1; 63]).await;
        let refusals = [
            (
                &big,
                r#"{"op":"add","format":"u8","with":"nope","target":"x"}"#,
                "no object",
            ),
            (
                &big,
                r#"{"op":"add","format":"u8","with":"a","target":"x"}"#,
                "must be equal",
            ),
            (
                &odd,
                r#"{"op":"add","format":"u16le","with":"odd","target":"x"}"#,
                "whole number",
            ),
        ];
        for (rec, op, says) in refusals {
            let e = run(&c, rec, op).await.unwrap_err();
            assert!(e.to_string().contains(says), "{op}: {e}");
        }
        assert!(c.head("bkt", "x").await.unwrap().is_none());
        // With a data drive of both operands' stopped: the same sum.
        let holder = drives.iter().position(|d| d.id == ra.drives[0]).unwrap();
        let c = drives[usize::from(holder == 0)].cluster.clone();
        drives.remove(holder).stop().await;
        run(
            &c,
            &ra,
            r#"{"op":"add","format":"f64le","with":"b","target":"c2"}"#,
        )
        .await
        .unwrap();
        let rc2 = c.head("bkt", "c2").await.unwrap().unwrap();
        assert!(read_all(&c, &rc2).await == want);
        for d in drives {
            d.stop().await;
        }
    });
}

/// `sort`: the drives sort their chunks, the coordinator merges; the new object is the
/// records sorted, for a multipart object whose parts cut records too, for integers, and
/// with a data drive stopped.
#[test]
fn an_object_sorts_into_a_new_one() {
    let root = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let mut drives = oed_tests::local_cluster(root.path(), K, M, CHUNK).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        // Doubles in no order, with a short last stripe.
        let n = (7 * K * CHUNK + 3000) / 8;
        let data: Vec<u8> = (0..n)
            .flat_map(|i| (((i * 7919) % 10_007) as f64 - 5000.5).to_le_bytes())
            .collect();
        let rec = put_object(&c, "bkt", "v", &data).await;
        let got = run(
            &c,
            &rec,
            r#"{"op":"sort","format":"f64le","target":"v.sorted"}"#,
        )
        .await
        .unwrap();
        assert_eq!(got.result["records"], n);
        let mut want: Vec<f64> = data
            .chunks(8)
            .map(|r| f64::from_le_bytes(r.try_into().unwrap()))
            .collect();
        want.sort_by(f64::total_cmp);
        let want: Vec<u8> = want.iter().flat_map(|v| v.to_le_bytes()).collect();
        let sorted = c.head("bkt", "v.sorted").await.unwrap().unwrap();
        assert!(read_all(&c, &sorted).await == want, "not sorted");
        assert!(got.cost.drive_cpu_seconds > 0.0 && got.cost.drives.len() == K);
        // i32 records in a multipart object whose parts end inside records.
        let ints: Vec<u8> = (0..5000i32)
            .flat_map(|i| (i.wrapping_mul(-7_777_777)).to_le_bytes())
            .collect();
        let cuts = [0, 4 * 1201 + 2, 4 * 3333 + 1, ints.len()];
        let mut parts = Vec::new();
        for (i, w) in cuts.windows(2).enumerate() {
            let key = format!("\u{1}p/sort/{:05}", i + 1);
            let r = put_object(&c, "bkt", &key, &ints[w[0]..w[1]]).await;
            parts.push(PartRef::of(i as u32 + 1, &r));
        }
        let obj = NewObject {
            bucket: "bkt".into(),
            key: "ints".into(),
            parts,
            etag: Some("e-3".into()),
            ..NewObject::default()
        };
        let irec = c
            .put_object(obj, futures_util::stream::empty())
            .await
            .unwrap()
            .record;
        run(
            &c,
            &irec,
            r#"{"op":"sort","format":"i32le","target":"ints.sorted"}"#,
        )
        .await
        .unwrap();
        let mut want: Vec<i32> = ints
            .chunks(4)
            .map(|r| i32::from_le_bytes(r.try_into().unwrap()))
            .collect();
        want.sort_unstable();
        let want: Vec<u8> = want.iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = c.head("bkt", "ints.sorted").await.unwrap().unwrap();
        assert!(read_all(&c, &s).await == want, "ints not sorted");
        // Not whole records: refused, nothing written.
        let odd = put_object(&c, "bkt", "odd", &[1; 63]).await;
        let e = run(&c, &odd, r#"{"op":"sort","format":"u16le","target":"x"}"#)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("whole number"), "{e}");
        assert!(c.head("bkt", "x").await.unwrap().is_none());
        // With a data drive stopped.
        let holder = drives.iter().position(|d| d.id == rec.drives[2]).unwrap();
        let c = drives[usize::from(holder == 0)].cluster.clone();
        drives.remove(holder).stop().await;
        let got = run(
            &c,
            &rec,
            r#"{"op":"sort","format":"f64le","target":"v.sorted2"}"#,
        )
        .await
        .unwrap();
        assert!(got.cost.parity_used);
        let sorted: Vec<f64> = {
            let r = c.head("bkt", "v.sorted2").await.unwrap().unwrap();
            read_all(&c, &r)
                .await
                .chunks(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                .collect()
        };
        assert!(sorted.is_sorted_by(|a, b| a.total_cmp(b).is_le()) && sorted.len() == n);
        for d in drives {
            d.stop().await;
        }
    });
}

/// A caller that goes away mid-operation (here the coordinator's request, dropped as a
/// disconnecting client's is) stops the drives' work on it: they count it cancelled, and
/// their operation threads are free for the next operation.
#[test]
fn drives_stop_an_operation_whose_caller_went_away() {
    let root = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let drives = oed_tests::local_cluster(root.path(), K, M, CHUNK).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        // Slow to compress at zstd's top level: seconds of work on each drive (text that
        // compresses; random bytes zstd would pass over quickly).
        let big: Vec<u8> = (0..600_000u64)
            .flat_map(|i| {
                format!("record {i} value {} status ok\n", i * 7919 % 100_003).into_bytes()
            })
            .collect();
        let rec = put_object(&c, "bkt", "big", &big).await;
        let slow: Op = serde_json::from_str(r#"{"op":"compressibility","level":19}"#).unwrap();
        let gave_up =
            tokio::time::timeout(std::time::Duration::from_millis(300), c.run_op(&rec, slow)).await;
        assert!(
            gave_up.is_err(),
            "the slow operation finished in 0.3 s: make it slower"
        );
        let cancelled = || {
            drives
                .iter()
                .map(|d| d.cluster.local_store().ops_cancelled())
                .sum::<u64>()
        };
        // Each drive notices at its next chunk (bounded wait: 60 s).
        let mut waited = 0;
        while cancelled() < K as u64 && waited < 600 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            waited += 1;
        }
        assert_eq!(cancelled(), K as u64, "every data drive stops its part");
        // Their operation threads are free: the next operation is answered.
        let got = run_healthy(&c, &rec, r#"{"op":"checksum","algorithm":"crc32c"}"#).await;
        assert_eq!(got.result["base64"], checksums(&big)[0].1);
        for d in drives {
            d.stop().await;
        }
    });
}

//! ADR 0014's premise: what one apply step of random keys costs at the app's scale (2^20
//! keys, 40-byte keys, 148-byte values, 260k-300k ops a step), in a redb table with a
//! 64 MiB cache and one durable commit a step, against sorted run files, one per step,
//! synced, the newest merged while it is at least half the run below it. A measurement,
//! not a design: no crc, no index, no bloom, no reads. Output: per step, then the totals.
//! `DURABLE_EVERY=n` makes redb's commit durable every n-th step only (the others
//! `Durability::None`).
use redb::{ReadableDatabase, TableDefinition};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::time::Instant;

const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("app");
const KEYS: u64 = 1 << 20;

fn key(n: u64) -> [u8; 40] {
    let mut k = [0u8; 40];
    k[..8].copy_from_slice(b"app/data");
    let mut x = n.wrapping_mul(0x9e3779b97f4a7c15) ^ 0xdeadbeef;
    for i in 0..4 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        k[8 + i * 8..16 + i * 8].copy_from_slice(&x.to_be_bytes());
    }
    k
}

fn step_ops(step: u64, n: usize) -> Vec<([u8; 40], Vec<u8>)> {
    let mut r = step.wrapping_mul(0x2545F4914F6CDD1D) | 1;
    let mut ops: Vec<([u8; 40], Vec<u8>)> = (0..n)
        .map(|i| {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            (key(r % KEYS), vec![(i % 251) as u8; 148])
        })
        .collect();
    ops.sort_by(|a, b| a.0.cmp(&b.0));
    ops.dedup_by(|a, b| a.0 == b.0);
    ops
}

fn redb_run(dir: &str, steps: u64, n: usize) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let db = redb::Builder::new()
        .set_cache_size(64 << 20)
        .create(format!("{dir}/i.redb"))
        .unwrap();
    let t0 = Instant::now();
    for s in 0..steps {
        let ops = step_ops(s, n);
        let t = Instant::now();
        let mut txn = db.begin_write().unwrap();
        let every: u64 = std::env::var("DURABLE_EVERY").map_or(1, |v| v.parse().unwrap());
        txn.set_durability(if (s + 1) % every == 0 { redb::Durability::Immediate } else { redb::Durability::None }).unwrap();
        {
            let mut tb = txn.open_table(T).unwrap();
            for (k, v) in &ops {
                tb.insert(&k[..], &v[..]).unwrap();
            }
        }
        txn.commit().unwrap();
        let len = std::fs::metadata(format!("{dir}/i.redb")).unwrap().len();
        println!(
            "redb step {s} ops {} {:.2}s file {} MB",
            ops.len(),
            t.elapsed().as_secs_f64(),
            len >> 20
        );
    }
    println!("redb total {:.1}s", t0.elapsed().as_secs_f64());
    let _ = db.begin_read();
}

// A run: records (klen u32, key, vlen u32, value) in key order.
fn write_run(path: &str, recs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> u64 {
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path).unwrap());
    let mut n = 0u64;
    for (k, v) in recs {
        w.write_all(&(k.len() as u32).to_le_bytes()).unwrap();
        w.write_all(&k).unwrap();
        w.write_all(&(v.len() as u32).to_le_bytes()).unwrap();
        w.write_all(&v).unwrap();
        n += 8 + k.len() as u64 + v.len() as u64;
    }
    let f = w.into_inner().unwrap();
    f.sync_data().unwrap();
    n
}

struct RunReader {
    r: BufReader<File>,
    head: Option<(Vec<u8>, Vec<u8>)>,
}
impl RunReader {
    fn open(p: &str) -> Self {
        let mut x = RunReader {
            r: BufReader::with_capacity(1 << 20, File::open(p).unwrap()),
            head: None,
        };
        x.adv();
        x
    }
    fn adv(&mut self) {
        let mut l = [0u8; 4];
        if self.r.read_exact(&mut l).is_err() {
            self.head = None;
            return;
        }
        let mut k = vec![0; u32::from_le_bytes(l) as usize];
        self.r.read_exact(&mut k).unwrap();
        self.r.read_exact(&mut l).unwrap();
        let mut v = vec![0; u32::from_le_bytes(l) as usize];
        self.r.read_exact(&mut v).unwrap();
        self.head = Some((k, v));
    }
}

fn runs_run(dir: &str, steps: u64, n: usize) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    // Size-tiered: a list of (id, bytes), newest last; merge the newest runs while the
    // newest's total reaches 1/4 of the run below.
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut next = 0u64;
    let mut written = 0u64;
    let t0 = Instant::now();
    for s in 0..steps {
        let ops = step_ops(s, n);
        let t = Instant::now();
        let p = format!("{dir}/{next}.run");
        let b = write_run(&p, &mut ops.into_iter().map(|(k, v)| (k.to_vec(), v)));
        written += b;
        runs.push((next, b));
        next += 1;
        // Tiering: merge the tail while it is >= 1/4 of the run before it (T = 4) or more than 4 runs.
        let mut merged = 0;
        loop {
            let l = runs.len();
            if l < 2 {
                break;
            }
            let tail: u64 = runs[l - 1].1;
            if tail * 2 < runs[l - 2].1 && l <= 8 {
                break;
            }
            // merge last two (newer wins)
            let (a, b2) = (runs[l - 2], runs[l - 1]);
            let mut ra = RunReader::open(&format!("{dir}/{}.run", a.0));
            let mut rb = RunReader::open(&format!("{dir}/{}.run", b2.0));
            let out = format!("{dir}/{next}.run");
            let mut it = std::iter::from_fn(|| match (&ra.head, &rb.head) {
                (None, None) => None,
                (Some(_), None) => {
                    let h = ra.head.take();
                    ra.adv();
                    h
                }
                (None, Some(_)) => {
                    let h = rb.head.take();
                    rb.adv();
                    h
                }
                (Some(x), Some(y)) => match x.0.cmp(&y.0) {
                    std::cmp::Ordering::Less => {
                        let h = ra.head.take();
                        ra.adv();
                        h
                    }
                    std::cmp::Ordering::Greater => {
                        let h = rb.head.take();
                        rb.adv();
                        h
                    }
                    std::cmp::Ordering::Equal => {
                        ra.adv();
                        let h = rb.head.take();
                        rb.adv();
                        h
                    }
                },
            });
            let nb = write_run(&out, &mut it);
            written += nb;
            merged += 1;
            std::fs::remove_file(format!("{dir}/{}.run", a.0)).unwrap();
            std::fs::remove_file(format!("{dir}/{}.run", b2.0)).unwrap();
            runs.truncate(l - 2);
            runs.push((next, nb));
            next += 1;
        }
        println!(
            "runs step {s} {:.2}s runs {} merges {} sizes {:?} MB",
            t.elapsed().as_secs_f64(),
            runs.len(),
            merged,
            runs.iter().map(|r| r.1 >> 20).collect::<Vec<_>>()
        );
    }
    println!(
        "runs total {:.1}s written {} MB",
        t0.elapsed().as_secs_f64(),
        written >> 20
    );
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let steps: u64 = a[2].parse().unwrap();
    let n: usize = a[3].parse().unwrap();
    match a[1].as_str() {
        "redb" => redb_run("target/proto-redb", steps, n),
        _ => runs_run("target/proto-runs", steps, n),
    }
}

//! ISA-L's erasure code, loaded at run time from Debian's `libisal2` (`apt-get install
//! libisal-dev`), so that `benches/ec.rs` can run it beside oed-ec in one process on the
//! same buffers. Only the benchmark uses it; nothing in the product links ISA-L.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_int, c_uchar, c_void};

type EncodeData =
    unsafe extern "C" fn(c_int, c_int, c_int, *mut c_uchar, *mut *mut c_uchar, *mut *mut c_uchar);
type InitTables = unsafe extern "C" fn(c_int, c_int, *mut c_uchar, *mut c_uchar);
type GenCauchy = unsafe extern "C" fn(*mut c_uchar, c_int, c_int);
type Invert = unsafe extern "C" fn(*mut c_uchar, *mut c_uchar, c_int) -> c_int;

/// The most inputs or outputs one call takes here.
const MAX_SHARDS: usize = 32;

/// The library's erasure-code entry points.
pub struct Isal {
    encode_data: EncodeData,
    init_tables: InitTables,
    gen_cauchy: GenCauchy,
    invert: Invert,
}

/// A count as ISA-L's C `int` takes it.
fn int(n: usize) -> c_int {
    c_int::try_from(n).expect("counts here fit a C int")
}

/// Looks `name` up in `lib`.
fn symbol(lib: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `lib` is a handle from dlopen that is never closed; `name` is a C string.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

impl Isal {
    /// The library, or `None` when it is not installed.
    #[must_use]
    pub fn load() -> Option<Self> {
        let lib = [c"libisal.so.2", c"libisal.so"]
            .into_iter()
            .find_map(|name| {
                // SAFETY: loading a shared library by name; its initialisers are ISA-L's own.
                let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
                (!h.is_null()).then_some(h)
            })?;
        // SAFETY (each transmute): the symbols are ISA-L's documented functions with these
        // C signatures (erasure_code.h, 2.x).
        unsafe {
            Some(Self {
                encode_data: std::mem::transmute::<*mut c_void, EncodeData>(symbol(
                    lib,
                    c"ec_encode_data",
                )?),
                init_tables: std::mem::transmute::<*mut c_void, InitTables>(symbol(
                    lib,
                    c"ec_init_tables",
                )?),
                gen_cauchy: std::mem::transmute::<*mut c_void, GenCauchy>(symbol(
                    lib,
                    c"gf_gen_cauchy1_matrix",
                )?),
                invert: std::mem::transmute::<*mut c_void, Invert>(symbol(
                    lib,
                    c"gf_invert_matrix",
                )?),
            })
        }
    }

    /// ISA-L's Cauchy generator matrix for `k` data and `m` parity shards: `k + m` rows
    /// of `k`, the first `k` the identity.
    fn matrix(&self, k: usize, m: usize) -> Vec<u8> {
        let mut a = vec![0u8; (k + m) * k];
        // SAFETY: `a` holds (k + m) * k bytes, what the function writes.
        unsafe { (self.gen_cauchy)(a.as_mut_ptr(), int(k + m), int(k)) };
        a
    }

    /// The tables ISA-L multiplies with for these `rows` (each of `k` coefficients).
    fn tables(&self, k: usize, mut rows: Vec<u8>) -> Code<'_> {
        let n = rows.len() / k;
        let mut tables = vec![0u8; 32 * k * n];
        // SAFETY: `rows` holds n * k coefficients and `tables` the 32 * k * n bytes the
        // function writes.
        unsafe { (self.init_tables)(int(k), int(n), rows.as_mut_ptr(), tables.as_mut_ptr()) };
        Code {
            isal: self,
            k,
            rows: n,
            tables,
        }
    }

    /// Encoding: `k` data shards in, `m` parity shards out.
    #[must_use]
    pub fn encoder(&self, k: usize, m: usize) -> Code<'_> {
        let a = self.matrix(k, m);
        self.tables(k, a[k * k..].to_vec())
    }

    /// Rebuilding data shard 0 from the next `k` shards (data 1 to k - 1 and the first
    /// parity): one row of the inverse of those shards' generator rows, as ISA-L's own
    /// example decodes. Made once, outside the timed loop: ISA-L at its best.
    #[must_use]
    pub fn rebuilder(&self, k: usize, m: usize) -> Code<'_> {
        let a = self.matrix(k, m);
        let mut survivors = a[k..k * k + k].to_vec();
        let mut inverse = vec![0u8; k * k];
        // SAFETY: both matrices hold k * k bytes.
        let singular =
            unsafe { (self.invert)(survivors.as_mut_ptr(), inverse.as_mut_ptr(), int(k)) };
        assert_eq!(singular, 0, "a Cauchy code's k rows are invertible");
        self.tables(k, inverse[..k].to_vec())
    }
}

/// Rows of coefficients prepared for ISA-L's `ec_encode_data`.
pub struct Code<'a> {
    isal: &'a Isal,
    k: usize,
    rows: usize,
    tables: Vec<u8>,
}

impl Code<'_> {
    /// `outputs[r]` = row `r` applied to the `k` inputs; every buffer of one length.
    pub fn apply(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        assert!(inputs.len() == self.k && outputs.len() == self.rows && self.k <= MAX_SHARDS);
        let len = inputs[0].len();
        assert!(inputs.iter().all(|i| i.len() == len) && outputs.iter().all(|o| o.len() == len));
        // ISA-L takes the inputs and tables as mutable pointers but only reads them.
        let mut ins = [std::ptr::null_mut::<u8>(); MAX_SHARDS];
        let mut outs = [std::ptr::null_mut::<u8>(); MAX_SHARDS];
        for (p, i) in ins.iter_mut().zip(inputs) {
            *p = i.as_ptr().cast_mut();
        }
        for (p, o) in outs.iter_mut().zip(outputs.iter_mut()) {
            *p = o.as_mut_ptr();
        }
        // SAFETY: k inputs and `rows` outputs of `len` bytes each, and the tables made for
        // k and `rows` by ec_init_tables.
        unsafe {
            (self.isal.encode_data)(
                int(len),
                int(self.k),
                int(self.rows),
                self.tables.as_ptr().cast_mut(),
                ins.as_mut_ptr(),
                outs.as_mut_ptr(),
            );
        }
    }
}

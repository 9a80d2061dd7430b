/*
 * armv7 NEON kernel for oed-ec (see neon32.rs for why this one kernel is C).
 *
 * outs[r][off..off+16) = XOR over i of coeff(r,i) * ins[i][off..off+16) for off in
 * [start, end), using the nibble tables passed in (32 bytes per (row, input): products of
 * the low nibble, then of the high nibble). The caller guarantees NEON is present, that
 * end - start is a multiple of 16, that [start, end) lies within every shard, and that
 * 1 <= rows <= 4. This file is compiled with -mfpu=neon and nothing else lives in it.
 */
#include <arm_neon.h>
#include <stddef.h>
#include <stdint.h>

static inline __attribute__((always_inline)) uint8x16_t
mul16(const uint8_t *table, uint8x16_t lo, uint8x16_t hi)
{
	uint8x8x2_t tl = { { vld1_u8(table), vld1_u8(table + 8) } };
	uint8x8x2_t th = { { vld1_u8(table + 16), vld1_u8(table + 24) } };
	uint8x8_t p0 = veor_u8(vtbl2_u8(tl, vget_low_u8(lo)), vtbl2_u8(th, vget_low_u8(hi)));
	uint8x8_t p1 = veor_u8(vtbl2_u8(tl, vget_high_u8(lo)), vtbl2_u8(th, vget_high_u8(hi)));
	return vcombine_u8(p0, p1);
}

static inline __attribute__((always_inline)) void
block(const uint8_t *const *tables, size_t rows, const uint8_t *const *ins, size_t n,
      uint8_t *const *outs, size_t start, size_t end)
{
	const uint8x16_t mask = vdupq_n_u8(0x0f);
	for (size_t off = start; off < end; off += 16) {
		uint8x16_t acc[4] = { vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0) };
		for (size_t i = 0; i < n; i++) {
			uint8x16_t x = vld1q_u8(ins[i] + off);
			uint8x16_t lo = vandq_u8(x, mask);
			uint8x16_t hi = vshrq_n_u8(x, 4);
			for (size_t r = 0; r < rows; r++)
				acc[r] = veorq_u8(acc[r], mul16(tables[r * n + i], lo, hi));
		}
		for (size_t r = 0; r < rows; r++)
			vst1q_u8(outs[r] + off, acc[r]);
	}
}

void oed_ec_neon32_block(const uint8_t *const *tables, size_t rows, const uint8_t *const *ins,
			 size_t n, uint8_t *const *outs, size_t start, size_t end)
{
	/* Constant row counts let the compiler keep the accumulators in registers. */
	switch (rows) {
	case 1: block(tables, 1, ins, n, outs, start, end); break;
	case 2: block(tables, 2, ins, n, outs, start, end); break;
	case 3: block(tables, 3, ins, n, outs, start, end); break;
	default: block(tables, 4, ins, n, outs, start, end); break;
	}
}

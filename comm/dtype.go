package comm

import (
	"fmt"
	"math"
	"unsafe"
)

// DType is an element type.
type DType int

// Element types.
const (
	Float32 DType = iota
	Float64
	BFloat16
	Float16
	Int32
	Int64
	Uint8
)

var dtypeNames = [...]string{"float32", "float64", "bfloat16", "float16", "int32", "int64", "uint8"}

func (d DType) String() string {
	if d >= 0 && int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", int(d))
}

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Float64, Int64:
		return 8
	case Float32, Int32:
		return 4
	case BFloat16, Float16:
		return 2
	}
	return 1
}

// ParseDType reads a dtype name.
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if n == s {
			return DType(i), nil
		}
	}
	return 0, fmt.Errorf("dtype %q: want one of %v", s, dtypeNames)
}

// ReduceOp combines values of the ranks.
type ReduceOp int

// Reduction operations.
const (
	Sum ReduceOp = iota
	Avg
	Min
	Max
	Prod
)

func (op ReduceOp) String() string {
	return [...]string{"sum", "avg", "min", "max", "prod"}[op]
}

// reduceInto combines src into dst element-wise (both of dtype d, same
// length). Avg sums here; the caller divides once at the end.
func reduceInto(d DType, op ReduceOp, dst, src []byte) {
	switch d {
	case Float32:
		reduceSlice(op, view[float32](dst), view[float32](src))
	case Float64:
		reduceSlice(op, view[float64](dst), view[float64](src))
	case Int32:
		reduceSlice(op, view[int32](dst), view[int32](src))
	case Int64:
		reduceSlice(op, view[int64](dst), view[int64](src))
	case Uint8:
		reduceSlice(op, dst, src)
	case BFloat16, Float16:
		a, b := view[uint16](dst), view[uint16](src)
		to, from := halfCodec(d)
		for i := range a {
			a[i] = to(reduceOne(op, from(a[i]), from(b[i])))
		}
	}
}

type number interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~uint8
}

func reduceSlice[T number](op ReduceOp, a, b []T) {
	b = b[:len(a)]
	switch op {
	case Sum, Avg:
		// Eight at a time: the hot loop of every reducing collective.
		i := 0
		for ; i+8 <= len(a); i += 8 {
			x, y := a[i:i+8:i+8], b[i:i+8:i+8]
			x[0] += y[0]
			x[1] += y[1]
			x[2] += y[2]
			x[3] += y[3]
			x[4] += y[4]
			x[5] += y[5]
			x[6] += y[6]
			x[7] += y[7]
		}
		for ; i < len(a); i++ {
			a[i] += b[i]
		}
	case Prod:
		for i := range a {
			a[i] *= b[i]
		}
	case Min:
		for i := range a {
			a[i] = min(a[i], b[i])
		}
	case Max:
		for i := range a {
			a[i] = max(a[i], b[i])
		}
	}
}

func reduceOne(op ReduceOp, a, b float32) float32 {
	switch op {
	case Prod:
		return a * b
	case Min:
		return min(a, b)
	case Max:
		return max(a, b)
	}
	return a + b
}

func divideSlice[T number](xs []T, n T) {
	for i := range xs {
		xs[i] /= n
	}
}

// divide divides every element by n (the end of Avg).
func divide(d DType, buf []byte, n int) {
	switch d {
	case Float32:
		divideSlice(view[float32](buf), float32(n))
	case Float64:
		divideSlice(view[float64](buf), float64(n))
	case Int32:
		divideSlice(view[int32](buf), int32(n))
	case Int64:
		divideSlice(view[int64](buf), int64(n))
	case Uint8:
		divideSlice(buf, uint8(n))
	case BFloat16, Float16:
		to, from := halfCodec(d)
		h := view[uint16](buf)
		for i := range h {
			h[i] = to(from(h[i]) / float32(n))
		}
	}
}

// view reinterprets b as a slice of T (b's length must be a multiple of
// T's size; host memory from the device is suitably aligned).
func view[T any](b []byte) []T {
	var zero T
	n := len(b) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// halfCodec converts the 16-bit float types to and from float32.
func halfCodec(d DType) (to func(float32) uint16, from func(uint16) float32) {
	if d == BFloat16 {
		return BFloat16FromFloat32, BFloat16ToFloat32
	}
	return Float16FromFloat32, Float16ToFloat32
}

// BFloat16ToFloat32 widens a bfloat16.
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// BFloat16FromFloat32 rounds to the nearest bfloat16 (ties to even).
func BFloat16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f { // NaN stays NaN
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// Float16ToFloat32 widens an IEEE half.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		f := float32(mant) / 1024 / 16384
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// Float16FromFloat32 rounds to the nearest IEEE half (ties to even),
// saturating to infinity.
func Float16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		if rem := mant & (1<<shift - 1); rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(exp)<<10 | mant>>13
	if rem := mant & 0x1fff; rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}

// SetElement writes element i of b (of dtype d) as the value v, rounded
// to the dtype (to the nearest for the 16-bit floats).
func SetElement(b []byte, d DType, i int, v float64) {
	at := b[i*d.Size():]
	switch d {
	case Float32:
		view[float32](at)[0] = float32(v)
	case Float64:
		view[float64](at)[0] = v
	case Int32:
		view[int32](at)[0] = int32(v)
	case Int64:
		view[int64](at)[0] = int64(v)
	case Uint8:
		at[0] = uint8(v)
	case BFloat16:
		view[uint16](at)[0] = BFloat16FromFloat32(float32(v))
	case Float16:
		view[uint16](at)[0] = Float16FromFloat32(float32(v))
	}
}

// Element reads element i of b (of dtype d).
func Element(b []byte, d DType, i int) float64 {
	at := b[i*d.Size():]
	switch d {
	case Float32:
		return float64(view[float32](at)[0])
	case Float64:
		return view[float64](at)[0]
	case Int32:
		return float64(view[int32](at)[0])
	case Int64:
		return float64(view[int64](at)[0])
	case Uint8:
		return float64(at[0])
	case BFloat16:
		return float64(BFloat16ToFloat32(view[uint16](at)[0]))
	}
	return float64(Float16ToFloat32(view[uint16](at)[0]))
}

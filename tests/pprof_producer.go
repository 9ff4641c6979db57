// pprof_producer writes pprof profiles with Go's own runtime/pprof, for
// tests/test_pprofkit_cmd.sh: pprofkit's reader and command must read another
// producer's files as go tool pprof does.
//
// Usage: pprof_producer OUTDIR
//
// OUTDIR/cpu.pb.gz: a CPU profile of about 0.6 s of busy loops in three functions (one
// calls a small function the compiler inlines, so some locations have several lines).
// OUTDIR/heap.pb.gz: a heap profile with every allocation sampled (MemProfileRate 1),
// made by two functions, some of it freed (inuse differs from alloc).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"
)

var sink uint64
var keep [][]byte

func step(x uint64) uint64 { return x*6364136223846793005 + 1442695040888963407 } // inlined

//go:noinline
func hot(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := 0; i < 10000; i++ {
			sink = step(sink)
		}
	}
}

//go:noinline
func warm(d time.Duration) { hot(d / 2); spin(d / 2) }

//go:noinline
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		sink ^= sink>>3 + 1
	}
}

//go:noinline
func allocSmall(n int) {
	for i := 0; i < n; i++ {
		keep = append(keep, make([]byte, 64))
	}
}

//go:noinline
func allocBig(n int) {
	for i := 0; i < n; i++ {
		b := make([]byte, 1<<16)
		if i%2 == 0 {
			keep = append(keep, b)
		}
	}
}

func write(path string, f func(*os.File) error) {
	out, err := os.Create(path)
	if err == nil {
		err = f(out)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pprof_producer:", err)
		os.Exit(1)
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pprof_producer OUTDIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	runtime.MemProfileRate = 1
	write(filepath.Join(dir, "cpu.pb.gz"), func(f *os.File) error {
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		hot(300 * time.Millisecond)
		warm(200 * time.Millisecond)
		spin(100 * time.Millisecond)
		pprof.StopCPUProfile()
		return nil
	})
	allocSmall(5000)
	allocBig(40)
	runtime.GC()
	write(filepath.Join(dir, "heap.pb.gz"), func(f *os.File) error {
		return pprof.Lookup("heap").WriteTo(f, 0)
	})
}

//go:build unix

package main

import (
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// sharedSection counts the workers inside one key's critical section, in a
// file mapped into the memory of every worker process of a job, so that two
// processes inside at once are seen without any Redis traffic.
type sharedSection struct {
	mem        []byte
	inside     *int32
	violations *int64
}

const sectionSize = 4096

// createSection makes the file a job's processes map.
func createSection(path string) error {
	return os.WriteFile(path, make([]byte, sectionSize), 0o600)
}

func openSection(path string) (*sharedSection, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, err := syscall.Mmap(int(f.Fd()), 0, sectionSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &sharedSection{
		mem:        mem,
		inside:     (*int32)(unsafe.Pointer(&mem[0])),
		violations: (*int64)(unsafe.Pointer(&mem[8])),
	}, nil
}

func (s *sharedSection) enter() {
	if s != nil && atomic.AddInt32(s.inside, 1) > 1 {
		atomic.AddInt64(s.violations, 1)
	}
}

func (s *sharedSection) exit() {
	if s != nil {
		atomic.AddInt32(s.inside, -1)
	}
}

// count returns the violations seen so far.
func (s *sharedSection) count() int64 { return atomic.LoadInt64(s.violations) }

func (s *sharedSection) close() { syscall.Munmap(s.mem) }

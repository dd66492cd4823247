package scheduler

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// checkBootstrap refuses an executable Lambda's provided.al2023 runtime on
// arm64 cannot start: anything but a 64-bit little-endian ELF for aarch64,
// and a dynamically linked one (a program interpreter or shared
// libraries), which `make functions` (CGO_ENABLED=0) never builds and
// which fails at init on a runtime without the libraries it names.
func checkBootstrap(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable (%v): build it with `make functions`", path, err)
	}
	defer f.Close()
	switch {
	case f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB || f.Machine != elf.EM_AARCH64:
		return fmt.Errorf("%s is built for %s (%s), want linux/arm64 (EM_AARCH64): Lambda fails at init; build it with `make functions`", path, f.Machine, f.Class)
	case f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN:
		return fmt.Errorf("%s is an ELF %s, not an executable", path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (it names a program interpreter): build it static with `make functions` (CGO_ENABLED=0)", path)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("%s is dynamically linked (needs %v): build it static with `make functions` (CGO_ENABLED=0)", path, libs)
	}
	return nil
}

// PlaceholderBootstrap is the smallest file the construct accepts as a
// function's bootstrap: a static linux/arm64 ELF executable header with
// one empty loadable segment and no code. It stands in for the real
// executables in tests that synthesize a stack without building them
// (infra's own); deployed, it would crash at once.
func PlaceholderBootstrap() []byte {
	const headerSize, progSize = 64, 56
	var b bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_AARCH64), Version: uint32(elf.EV_CURRENT),
		Entry: 0x400000 + headerSize + progSize, Phoff: headerSize, Ehsize: headerSize,
		Phentsize: progSize, Phnum: 1, Shentsize: 64,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	hdr.Ident[elf.EI_OSABI] = byte(elf.ELFOSABI_LINUX)
	prog := elf.Prog64{
		Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Vaddr: 0x400000, Paddr: 0x400000,
		Filesz: headerSize + progSize, Memsz: headerSize + progSize, Align: 0x10000,
	}
	for _, v := range []any{hdr, prog} {
		if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
			panic(errors.New("placeholder bootstrap: " + err.Error()))
		}
	}
	return b.Bytes()
}

// WritePlaceholders writes PlaceholderBootstrap as <dir>/<name>/bootstrap
// for each function name.
func WritePlaceholders(dir string, names ...string) error {
	for _, name := range names {
		path := filepath.Join(dir, name, "bootstrap")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, PlaceholderBootstrap(), 0o755); err != nil {
			return err
		}
	}
	return nil
}

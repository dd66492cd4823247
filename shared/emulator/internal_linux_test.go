package emulator

import (
	"slices"
	"strings"
	"testing"
)

func TestScanListeners(t *testing.T) {
	t.Parallel()
	const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F91 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 222 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1F92 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 333 1 0000000000000000 100 0 0 10 0
`
	const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:4B4D 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 444 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:4B4E 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 555 1 0000000000000000 100 0 0 10 0
   2: 00000000000000000000000001000000:4B4F 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 666 1 0000000000000000 100 0 0 10 0
`
	tests := []struct {
		name   string
		table  string
		inodes map[string]bool
		want   []string
	}{
		{"our loopback listener", tcp, map[string]bool{"111": true}, []string{"127.0.0.1:8080"}},
		{"someone else's listener", tcp, map[string]bool{"999": true}, nil},
		{"established, not listening", tcp, map[string]bool{"222": true}, nil},
		{"every interface", tcp, map[string]bool{"111": true, "333": true}, []string{"127.0.0.1:8080", "0.0.0.0:8082"}},
		{"IPv4-mapped loopback is unmapped", tcp6, map[string]bool{"444": true}, []string{"127.0.0.1:19277"}},
		{"IPv6 any", tcp6, map[string]bool{"555": true}, []string{"[::]:19278"}},
		{"IPv6 loopback", tcp6, map[string]bool{"666": true}, []string{"[::1]:19279"}},
	}
	for _, tt := range tests {
		got, err := scanListeners(strings.NewReader(tt.table), tt.inodes)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		var s []string
		for _, a := range got {
			s = append(s, a.String())
		}
		if !slices.Equal(s, tt.want) {
			t.Errorf("%s: scanListeners = %v, want %v", tt.name, s, tt.want)
		}
	}
	if _, err := scanListeners(strings.NewReader("header\n 0: 0100:zz 0 0A 0 0 0 0 0 111\n"), map[string]bool{"111": true}); err == nil {
		t.Error("a malformed address: want an error")
	}
}

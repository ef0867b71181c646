package proc

import (
	"bufio"
	"encoding/hex"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/internal/sys/private"
)

// PortOwner returns the user id of the process listening on endpoint's
// port at one of this host's addresses (endpoint's own, or all of
// them), from /proc/net/tcp and tcp6; ok is false when no such listener
// is found (another host's port, or /proc unreadable).
func PortOwner(endpoint string) (uid int, ok bool) {
	host, portStr, err := net.SplitHostPort(endpoint)
	if err != nil {
		return 0, false
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return 0, false
	}
	want := net.ParseIP(host)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if uid, ok := listenerIn(table, uint16(port), want); ok {
			return uid, true
		}
	}
	return 0, false
}

// tcpListen is the state of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// listenerIn finds a listener on port in one /proc/net/tcp table at ip
// (nil or unspecified: any address) or at the unspecified address.
func listenerIn(table string, port uint16, ip net.IP) (int, bool) {
	f, err := os.Open(table)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	lines.Scan() // the header
	for lines.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
		fields := strings.Fields(lines.Text())
		if len(fields) < 8 || fields[3] != tcpListen {
			continue
		}
		addr, portHex, found := strings.Cut(fields[1], ":")
		p, err := strconv.ParseUint(portHex, 16, 16)
		if !found || err != nil || uint16(p) != port {
			continue
		}
		local := procAddr(addr)
		if ip != nil && !ip.IsUnspecified() && local != nil && !local.IsUnspecified() && !local.Equal(ip) {
			continue
		}
		uid, err := strconv.Atoi(fields[7])
		if err != nil {
			continue
		}
		return uid, true
	}
	return 0, false
}

// procAddr decodes an address of /proc/net/tcp (host-order 32-bit words
// in hex); nil if malformed.
func procAddr(s string) net.IP {
	b, err := hex.DecodeString(s)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return nil
	}
	// Each 32-bit word is in the host's (little-endian) order.
	for i := 0; i+4 <= len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	return net.IP(b)
}

// PortHolderNote names the owner of endpoint's port when another user of
// this host holds it, as "; the port is held by user NAME (uid N)", to
// add to an error; "" otherwise.
func PortHolderNote(endpoint string) string {
	uid, ok := PortOwner(endpoint)
	if !ok || uid == os.Getuid() {
		return ""
	}
	return "; the port is held by " + private.UserName(uid)
}

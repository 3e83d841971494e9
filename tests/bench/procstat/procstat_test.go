package procstat

import (
	"os"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	line := []byte("1234 (npu hooks (x)) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 12 0 100 1000 200")
	got, err := ParseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3*time.Second {
		t.Fatalf("cpu = %s, want 3s (300 ticks)", got)
	}
	if _, err := ParseStat([]byte("garbage")); err == nil {
		t.Fatal("garbage parsed")
	}
}

func TestParseStatus(t *testing.T) {
	hwm, rss, anon, err := ParseStatus([]byte("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t 512 kB\n"))
	if err != nil || hwm != 2<<20 || rss != 1<<20 || anon != 512<<10 {
		t.Fatalf("hwm %d rss %d anon %d err %v", hwm, rss, anon, err)
	}
	if _, _, _, err := ParseStatus([]byte("Name:\tx\n")); err == nil {
		t.Fatal("missing fields accepted")
	}
}

func TestReadSelf(t *testing.T) {
	u, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.PeakRSS <= 0 || u.RSS <= 0 || u.PeakRSS < u.RSS || u.AnonRSS <= 0 || u.AnonRSS > u.RSS {
		t.Fatalf("usage of this process = %+v", u)
	}
}

func TestParseMachineStatCountsBusyTicksOnly(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	stat := []byte("cpu  100 20 30 5000 70 4 6 10 0 0\ncpu0 50 10 15 2500 35 2 3 5 0 0\n")
	got, err := ParseMachineStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1700 * time.Millisecond; got != want {
		t.Fatalf("busy %s, want %s (user+nice+system+irq+softirq+steal = 170 ticks)", got, want)
	}
	if _, err := ParseMachineStat([]byte("intr 1 2 3\n")); err == nil {
		t.Fatal("a file without the cpu line must be refused")
	}
	if busy, err := MachineBusy(); err != nil || busy <= 0 {
		t.Fatalf("this machine's busy time %s, %v", busy, err)
	}
}

// pprof_check.go — reads a pprof file the way Go's pprof does
// (github.com/google/pprof/profile: Parse, which takes gzip with several
// members, then CheckValid) and prints facts about it, one "key value" per
// line, for tests/consumers/test_pprof.sh to assert on. It also checks
// what CheckValid does not: location and function ids numbered 1..n, one
// Line per location, every sample labelled with its thread, timestamps inside
// [time_nanos, time_nanos + duration_nanos].
//
// usage: pprof_check FILE   (exit 1 with a message on any failure)
// Built by tests/consumers/setup.sh in GOPATH mode.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "pprof_check: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: pprof_check FILE")
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	p, err := profile.Parse(f)
	if err != nil {
		fail("parse: %v", err)
	}
	if err := p.CheckValid(); err != nil {
		fail("CheckValid: %v", err)
	}
	for i, l := range p.Location {
		if l.ID != uint64(i+1) {
			fail("location %d has id %d", i, l.ID)
		}
		if len(l.Line) != 1 || l.Line[0].Function == nil {
			fail("location %d: want one line with a function", l.ID)
		}
	}
	for i, fn := range p.Function {
		if fn.ID != uint64(i+1) {
			fail("function %d has id %d", i, fn.ID)
		}
	}

	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	fmt.Printf("sample_types %s\n", strings.Join(types, ","))
	fmt.Printf("default_sample_type %s\n", p.DefaultSampleType)
	if p.PeriodType != nil {
		fmt.Printf("period_type %s/%s\n", p.PeriodType.Type, p.PeriodType.Unit)
	}
	fmt.Printf("period %d\n", p.Period)
	fmt.Printf("time_nanos %d\n", p.TimeNanos)
	fmt.Printf("duration_nanos %d\n", p.DurationNanos)
	fmt.Printf("samples %d\n", len(p.Sample))
	fmt.Printf("mappings %d\n", len(p.Mapping))
	fmt.Printf("locations %d\n", len(p.Location))
	fmt.Printf("functions %d\n", len(p.Function))
	for _, c := range p.Comments {
		fmt.Printf("comment %s\n", c)
	}

	sums := make([]int64, len(p.SampleType))
	perThread := map[string]int64{}
	timed := 0
	var minTS, maxTS int64
	for i, s := range p.Sample {
		for k, v := range s.Value {
			sums[k] += v
		}
		// Go drops numeric labels whose value is 0: thread_id of tid 0
		// (folded input's thread) arrives as no label.
		tids := s.NumLabel["thread_id"]
		names := s.Label["thread_name"]
		if len(tids) > 1 || len(names) != 1 {
			fail("sample %d: want one thread_id and one thread_name label", i)
		}
		tid := int64(0)
		if len(tids) == 1 {
			tid = tids[0]
		}
		perThread[fmt.Sprintf("%d %s", tid, names[0])] += s.Value[0]
		if ts := s.NumLabel["timestamp_ns"]; len(ts) == 1 {
			if u := s.NumUnit["timestamp_ns"]; len(u) != 1 || u[0] != "nanoseconds" {
				fail("sample %d: timestamp_ns unit %v", i, u)
			}
			if timed == 0 || ts[0] < minTS {
				minTS = ts[0]
			}
			if timed == 0 || ts[0] > maxTS {
				maxTS = ts[0]
			}
			timed++
		}
	}
	for k, v := range sums {
		fmt.Printf("sum %s %d\n", types[k], v)
	}
	fmt.Printf("timed_samples %d\n", timed)
	if timed > 0 {
		fmt.Printf("first_timestamp %d\nlast_timestamp %d\n", minTS, maxTS)
		if minTS != p.TimeNanos || maxTS > p.TimeNanos+p.DurationNanos {
			fail("timestamps [%d, %d] outside [time_nanos %d, + duration %d]", minTS, maxTS, p.TimeNanos, p.DurationNanos)
		}
	}
	var threads []string
	for k := range perThread {
		threads = append(threads, k)
	}
	sort.Strings(threads)
	for _, k := range threads {
		fmt.Printf("thread %s = %d\n", k, perThread[k])
	}
}

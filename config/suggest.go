package config

import (
	"fmt"
	"sort"
)

// didYouMean returns `; did you mean "x"?` for the candidate nearest to s
// by edit distance (Levenshtein: insertions, deletions, substitutions and
// transpositions of two neighbours each count one), when it is at most 2
// edits away and fewer than half of s's bytes; "" otherwise. Ties go to
// the candidate that sorts first.
func didYouMean(s string, candidates []string) string {
	cs := append([]string(nil), candidates...)
	sort.Strings(cs)
	best, bestD := "", 3
	for _, c := range cs {
		if d := editDistance(s, c); d < bestD && 2*d < len(s) {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the optimal string alignment distance between a and b,
// over bytes.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

package ring

import "math"

// Stats describes how evenly a ring spreads the hash space. It is computed
// exactly from the points, not by sampling keys, and marshals to JSON.
type Stats struct {
	HashVersion     int    `json:"hash_version"`
	Version         string `json:"version"`
	Members         int    `json:"members"`
	Points          int    `json:"points"`
	PointsPerWeight int    `json:"points_per_weight"`
	Collisions      int    `json:"collisions"`
	TotalWeight     int    `json:"total_weight"`
	// CV is the coefficient of variation (population standard deviation
	// over mean) of the members' Ratio: 0 is a perfect spread. With equal
	// weights it is the CV of the shares themselves.
	CV float64 `json:"cv"`
	// MinRatio and MaxRatio are the extreme values of Ratio.
	MinRatio float64 `json:"min_ratio"`
	MaxRatio float64 `json:"max_ratio"`
	// Shares holds one entry per member, sorted by ID.
	Shares []MemberStats `json:"shares"`
}

// MemberStats is one member's part of the ring.
type MemberStats struct {
	ID     string `json:"id"`
	Weight int    `json:"weight"`
	Points int    `json:"points"`
	// Share is the fraction of the 2³² hash space the member owns, so the
	// fraction of uniformly hashed keys it gets.
	Share float64 `json:"share"`
	// Fair is Weight divided by the total weight: the share it should own.
	Fair float64 `json:"fair"`
	// Ratio is Share / Fair: 1 is exactly fair, 1.1 is 10% overloaded.
	Ratio float64 `json:"ratio"`
}

// Stats returns the ring's balance statistics. It takes time linear in the
// number of points and allocates the result.
func (r *Ring) Stats() Stats {
	arcs := make([]uint64, len(r.members))
	n := len(r.hashes)
	for i, h := range r.hashes {
		// Point i owns the hashes after its predecessor up to its own;
		// point 0 also owns the wrap-around above the last point.
		var arc uint64
		if i == 0 {
			arc = 1<<32 - uint64(r.hashes[n-1]) + uint64(h)
		} else {
			arc = uint64(h - r.hashes[i-1])
		}
		arcs[r.owners[i]] += arc
	}
	totalWeight := 0
	for _, m := range r.members {
		totalWeight += m.Weight
	}
	s := Stats{
		HashVersion:     HashVersion,
		Version:         r.version,
		Members:         len(r.members),
		Points:          n,
		PointsPerWeight: r.pointsPerWeight,
		Collisions:      r.collisions,
		TotalWeight:     totalWeight,
		MinRatio:        math.Inf(1),
		MaxRatio:        math.Inf(-1),
		Shares:          make([]MemberStats, len(r.members)),
	}
	var sum, sumSq float64
	for i, m := range r.members {
		ms := MemberStats{
			ID:     m.ID,
			Weight: m.Weight,
			Points: m.Weight * r.pointsPerWeight,
			Share:  float64(arcs[i]) / (1 << 32),
			Fair:   float64(m.Weight) / float64(totalWeight),
		}
		ms.Ratio = ms.Share / ms.Fair
		s.Shares[i] = ms
		sum += ms.Ratio
		sumSq += ms.Ratio * ms.Ratio
		s.MinRatio = min(s.MinRatio, ms.Ratio)
		s.MaxRatio = max(s.MaxRatio, ms.Ratio)
	}
	mean := sum / float64(len(r.members))
	variance := max(sumSq/float64(len(r.members))-mean*mean, 0)
	s.CV = math.Sqrt(variance) / mean
	return s
}

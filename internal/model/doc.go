// Package model holds the plain types every other package shares: node ids,
// liveness and its transition table, node information and the cluster
// snapshot the planner reads.
//
// It imports only the standard library and must never import anything from
// this module: it is the bottom of the import graph.
package model

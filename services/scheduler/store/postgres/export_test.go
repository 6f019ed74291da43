package postgres

// SatisfyDependenciesSQL is SatisfyDependencies' statement, for its plan's test.
const SatisfyDependenciesSQL = satisfyDependenciesSQL

// HeldReadSQL and HeldCountSQL are the lock batch's reads of an execution's held assignments,
// for their plans' test.
var HeldReadSQL, HeldCountSQL = heldReadSQL, heldCountSQL

// NextPendingTaskSQL is NextPending's pick of a wave's first pending task ($1 execution, $2
// wave), and PrefetchNextSQL the lock batch's read of the start of a wave's pending assignments
// ($1 execution, $2 an assignment of the wave) with a limit given as SQL, for their plans' test.
const NextPendingTaskSQL = nextPendingTaskSQL

var PrefetchNextSQL = prefetchNextSQL

// HeldPlanSQL and HeldPlanEndSQL surround the held reads in the lock's batch, for their plans'
// test.
const HeldPlanSQL, HeldPlanEndSQL = heldPlanSQL, heldPlanEndSQL

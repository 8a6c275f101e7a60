"""Out-of-order backprop (Oh et al., "Out-of-order backprop", EuroSys 2022) as task graphs.

The weight gradient ``W`` of a layer feeds only its update (and its gradient exchange); the one hard
constraint is that layer ``l``'s update ends before layer ``l``'s forward of the next iteration. So the
``W`` passes may be reordered to hide communication and launch overhead:

- `layersched.methods.ooo.dataparallel`: per-layer all-reduces on a network processor, reverse first-k and a
  CP-SAT search over the full order, against the usual reverse order with buckets;
- `layersched.methods.ooo.multistream`: one device with a main and a sub stream and a host that launches
  kernels, ``W`` kernels on the sub stream against the serial order;
- `layersched.methods.ooo.pipeline`: gradient fast-forwarding and modulo layer allocation against GPipe.

Every schedule is a `solvers.Problem` timed by `solvers.time_orders` or solved by `solvers.cpsat`,
and passes `solvers.validate`.
"""

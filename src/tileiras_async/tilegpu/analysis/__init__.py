"""What the tile-GPU passes decide from: analyses and planners that read the IR and return plans, and write
nothing (the passes record what they choose as attributes).  mma / wgmma / tcgen05 / scaled_mma: tensor-core
and FMA-chain plans; software_pipeline: K-loop candidates, geometry and movable loads; smem: scratch sizes;
tensor_maps: which copies tensor maps can do, and the launch hooks; facts: what launch hints promise."""

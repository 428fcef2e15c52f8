"""The tile-GPU dialect: tiles with layouts over threads, shared memory, async copies, mbarriers, MMA and
loop schedules, and (in `passes`) the ordered, named pass list that lowers cuda_tile into it per target.
"""

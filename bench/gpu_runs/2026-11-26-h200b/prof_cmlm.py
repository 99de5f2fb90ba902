"""Why is the bundled CMLM 22x slower in bf16 than fp32 on the GPU? torch.profiler over one translate call each."""
import time, torch, gzip
from torch.profiler import profile, ProfilerActivity
from mhfast.translation import load_bundled_model, BUNDLED_TEST_SOURCE
opener = gzip.open if str(BUNDLED_TEST_SOURCE).endswith(".gz") else open
with opener(BUNDLED_TEST_SOURCE, "rt") as f:
    src = [l.strip() for _, l in zip(range(16), f)]
for dt in (torch.float32, torch.bfloat16):
    tr = load_bundled_model(device="cuda")
    if dt != torch.float32:
        tr.cmlm.model.to(dt)
    opts = dict(chains=5, epochs=1, burn_in=0)
    tr.translate(src[:2], sampler_options=opts)
    torch.cuda.synchronize(); t0 = time.perf_counter()
    tr.translate(src, sampler_options=opts)
    torch.cuda.synchronize(); print(f"\n===== {dt}: {time.perf_counter()-t0:.2f} s for 16 sentences x 5 chains, 1 epoch", flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=False) as prof:
        tr.translate(src[:4], sampler_options=opts)
        torch.cuda.synchronize()
    ka = prof.key_averages()
    print(ka.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))
    print(ka.table(sort_by="self_cuda_time_total", row_limit=20, max_name_column_width=60))
    del tr; torch.cuda.empty_cache()

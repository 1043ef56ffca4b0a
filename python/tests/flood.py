"""Other tenants' traffic for eviction tests: blocks put into a namespace of their own until older
blocks of the same size class have been pushed out of kvtierd's host tier."""
import numpy as np

import kvtier

BATCH = 500


def flood(url, block_bytes, tokens_per_block, batches):
    """Puts batches x 500 zero blocks of block_bytes into the namespace "flood" at url."""
    with kvtier.connect(url) as client:
        ns = client.register_namespace(kvtier.NamespaceDescriptor(
            model_id="flood", kv_dtype="int8", num_layers=1, num_kv_heads=1, head_dim=1,
            tokens_per_block=tokens_per_block, layout_tag="test"), block_bytes)
        for batch in range(batches):
            keys = kvtier.fold_foreign_keys(ns, [(batch * BATCH + i).to_bytes(8, "little")
                                                 for i in range(BATCH)])
            client.put(ns, keys, np.zeros((BATCH, block_bytes), dtype=np.uint8))

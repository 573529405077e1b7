"""A model the built-in ones cannot express: DeepFM plus DIN-style target attention over the user's history,
written in PyTorch on Kestrel's tables.

For each history field paired with a target field (hist_categories with item_category, hist_items with
item_id in kestrel_datagen --format=schema data), the history's rows are weighed by their softmax-normalized
dot products with the target's embedding, scaled by a learned sharpness s: a = sum_i softmax_i(s <t, h_i>) h_i,
which can single out the history
entries that match the target instead of averaging them all. The attention vectors join the fields in the FM
and the MLP. Everything else is examples/torch/deepfm.py's DeepFM (the tables and their optimizers on
in-process servers, the dense part on them too).

    python3 examples/torch/din.py --config DATA/job.pbtxt --train DATA/train.tsv --test DATA/test.tsv

Prints the test AUC.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepfm  # noqa: E402  (the DeepFM this model extends)

import kestrel  # noqa: E402

PAIRS = (("hist_categories", "item_category"), ("hist_items", "item_id"))


def attend(target, rows, offsets, scale):
    """sum_i softmax_i(scale <target_b, h_i>) h_i per example b; zeros for an empty history."""
    examples = len(offsets)
    lengths = torch.diff(offsets, append=torch.tensor([len(rows)]))
    bag = torch.repeat_interleave(torch.arange(examples), lengths)
    position = torch.arange(len(rows)) - offsets[bag]
    longest = int(lengths.max()) if examples else 0
    padded = rows.new_zeros(examples, max(longest, 1), rows.shape[1]).index_put((bag, position), rows)
    mask = torch.arange(padded.shape[1])[None, :] < lengths[:, None]
    scores = (scale * (padded * target[:, None, :]).sum(-1)).masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=1), nan=0.0)  # an empty history: all -inf
    return (weights[:, :, None] * padded).sum(1)


class Din(deepfm.DeepFM):
    def __init__(self, client, fields, field_tables, dense_dim, dim, hidden):
        self.pairs = [(h, t) for h, t in PAIRS if h in fields and t in fields]
        if not self.pairs:
            raise ValueError(f"no history field with its target among {fields}")
        super().__init__(client, fields, field_tables, dense_dim, dim, hidden, extra_vectors=len(self.pairs))
        # The attention's sharpness, learned (as exp of it): the embeddings start small (N(0, 0.01)), so plain
        # dot products would weigh every history entry alike.
        self.log_scale = torch.nn.Parameter(torch.zeros(len(self.pairs)))  # exp(5 + it): starts near e^5 = 150

    def dense_parameters(self):
        yield from super().dense_parameters()
        yield self.log_scale

    def embed(self, feats, clock):
        out = self.emb(feats, clock, sequences=tuple(h for h, _ in self.pairs))
        extra = []
        for history, target in self.pairs:
            rows, offsets = out[history]
            lengths = torch.diff(offsets, append=torch.tensor([len(rows)]))
            # The history as DeepFM sees it too (its mean: the schema's pooling), and the attention vector.
            sums = torch.zeros(len(offsets), rows.shape[1]).index_add_(
                0, torch.repeat_interleave(torch.arange(len(offsets)), lengths), rows)
            out[history] = sums / lengths.clamp(min=1)[:, None]
            extra.append(attend(out[target], rows, offsets, torch.exp(5.0 + self.log_scale[len(extra)])))
        return torch.stack([out[f] for f in self.fields] + extra, 1)


if __name__ == "__main__":
    deepfm.run(Din, __doc__, "torch-din")

"""The book's printed tensors that more than one test file compares with (Chapter 3, on "Your journey starts with one
step" and its hand-set 3-d inputs)."""

# SelfAttention_v1 after torch.manual_seed(123): 3.4.1's attn_weights_2, the weights of query x^2
BOOK_V1_WEIGHTS_2 = [0.1500, 0.2264, 0.2199, 0.1311, 0.0906, 0.1820]

# SelfAttention_v2 after torch.manual_seed(789): the attn_weights of section 3.5.1, before the mask
BOOK_V2_WEIGHTS = [
    [0.1921, 0.1646, 0.1652, 0.1550, 0.1721, 0.1510],
    [0.2041, 0.1659, 0.1662, 0.1496, 0.1665, 0.1477],
    [0.2036, 0.1659, 0.1662, 0.1498, 0.1664, 0.1480],
    [0.1869, 0.1667, 0.1668, 0.1571, 0.1661, 0.1564],
    [0.1830, 0.1669, 0.1670, 0.1588, 0.1658, 0.1585],
    [0.1935, 0.1663, 0.1666, 0.1542, 0.1666, 0.1529],
]

# Exercise 3.2 (appendix C): MultiHeadAttentionWrapper(3, 1, 6, 0.0, num_heads=2) after torch.manual_seed(123), the
# wrapper with d_out = 1 per head, so its 2 heads give 2-dimensional context vectors; the book prints a batch of two
# copies of the journey, shape (2, 6, 2), each copy these rows
BOOK_EXERCISE_3_2 = [[-0.5740, 0.2216], [-0.7320, 0.0155], [-0.7774, -0.0546],
                     [-0.6979, -0.0817], [-0.6538, -0.0957], [-0.6424, -0.1065]]

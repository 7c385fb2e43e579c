"""A planted contamination set for benchmarks/studies/audit_bench.py (written for this benchmark).

EVAL: 24 physics/maths word problems. NEAR_DUP[i] is EVAL[i] with a small edit (a number, a word or
punctuation changed), for i < 12. PARAPHRASE[i] restates EVAL[12 + i] in other words with the same
answer, for i < 12.
"""

EVAL = [
    "A car accelerates uniformly from rest to 24 m/s in 8 seconds. What is its acceleration?",
    "A ball is dropped from a height of 45 m. Ignoring air resistance, how long does it take to reach the ground? Use g = 10 m/s^2.",
    "A resistor of 12 ohms is connected to a 6 V battery. What current flows through the resistor?",
    "A block of mass 5 kg rests on a frictionless surface and is pushed with a force of 20 N. Find its acceleration.",
    "What is the kinetic energy of a 2 kg object moving at 3 m/s?",
    "A spring with spring constant 200 N/m is compressed by 0.1 m. How much elastic potential energy is stored?",
    "A wave has a frequency of 50 Hz and a wavelength of 4 m. What is its speed?",
    "How much heat is needed to raise the temperature of 2 kg of water by 10 degrees Celsius? The specific heat of water is 4200 J/(kg K).",
    "A lens has a focal length of 20 cm. An object is placed 30 cm from the lens. Where is the image formed?",
    "A satellite orbits Earth in a circle of radius 7000 km with a period of 98 minutes. What is its orbital speed?",
    "Two charges of 2 microcoulombs each are separated by 0.3 m in vacuum. What is the electrostatic force between them?",
    "A pendulum has a length of 2.5 m. What is its period of small oscillations on Earth?",
    "A train travels 180 km in 2 hours and then 120 km in 1 hour. What is its average speed for the whole trip?",
    "A 60 W light bulb is left on for 5 hours. How much electrical energy does it use in kilowatt-hours?",
    "A stone is thrown horizontally at 15 m/s from the top of a 20 m high cliff. How far from the base of the cliff does it land?",
    "An ideal gas at 300 K and 100 kPa is heated at constant volume to 450 K. What is its new pressure?",
    "A 1500 kg car moving at 20 m/s brakes to a stop in 50 m. What is the average braking force?",
    "A transformer has 100 turns on the primary coil and 500 turns on the secondary. If the primary voltage is 230 V, what is the secondary voltage?",
    "A diver is 12 m below the surface of a lake. What is the gauge pressure on the diver? Take the density of water as 1000 kg/m^3 and g = 9.8 m/s^2.",
    "A wheel of radius 0.4 m turns at 300 revolutions per minute. What is the linear speed of a point on its rim?",
    "Light travels from air into glass with refractive index 1.5 at an angle of incidence of 30 degrees. What is the angle of refraction?",
    "A 10 kg box is lifted 3 m vertically at constant speed. How much work is done against gravity? Use g = 9.8 m/s^2.",
    "A radioactive sample has a half-life of 6 hours. What fraction of it remains after 18 hours?",
    "Two resistors of 4 ohms and 12 ohms are connected in parallel. What is their equivalent resistance?",
]

NEAR_DUP = [  # EVAL[i], small edits
    "A car accelerates uniformly from rest to 32 m/s in 8 seconds. What is its acceleration?",
    "A ball is dropped from a height of 45 m. Neglecting air resistance, how long does it take to reach the ground? Use g = 10 m/s^2.",
    "A resistor of 12 ohm is connected to a 6 volt battery. What current flows through the resistor?",
    "A block of mass 5 kg rests on a frictionless table and is pushed with a force of 20 N. Find its acceleration.",
    "What is the kinetic energy of a 4 kg object moving at 3 m/s?",
    "A spring with spring constant 200 N/m is stretched by 0.1 m. How much elastic potential energy is stored?",
    "A wave has a frequency of 50 Hz and a wavelength of 4 m; what is its speed?",
    "How much heat is needed to raise the temperature of 2 kg of water by 15 degrees Celsius? The specific heat of water is 4200 J/(kg K).",
    "A lens has a focal length of 20 cm. An object is placed 30 cm from the lens. Where will the image be formed?",
    "A satellite orbits Earth on a circle of radius 7000 km with a period of 98 minutes. What is its orbital speed?",
    "Two charges of 3 microcoulombs each are separated by 0.3 m in vacuum. What is the electrostatic force between them?",
    "A simple pendulum has a length of 2.5 m. What is its period of small oscillations on Earth?",
]

PARAPHRASE = [  # EVAL[12 + i], reworded, same answer
    "Over a whole journey a train covers 180 km during the first two hours and 120 km during the next hour. Find the mean speed.",
    "How many kilowatt-hours does a 60-watt lamp consume if it stays switched on for five hours?",
    "From a cliff 20 m tall, a rock is launched horizontally with speed 15 m/s. At what distance from the foot of the cliff does it hit the ground?",
    "The temperature of an ideal gas kept in a rigid container rises from 300 K to 450 K. If it started at 100 kPa, what pressure does it reach?",
    "Braking over a distance of 50 m brings a car of mass 1500 kg from 20 m/s to rest. Determine the mean force of the brakes.",
    "The primary winding of a transformer has 100 turns and its secondary winding 500 turns. With 230 V across the primary, find the output voltage.",
    "Find the gauge pressure experienced by a swimmer at a depth of 12 m in a lake (water density 1000 kg/m^3, g = 9.8 m/s^2).",
    "Points on the edge of a 0.4 m radius wheel spinning at 300 rpm move at what linear speed?",
    "A ray passes from air into glass (n = 1.5), hitting the surface 30 degrees from the normal. Find the refraction angle.",
    "How much work against gravity is needed to raise a box of 10 kg by 3 metres at a steady speed (g = 9.8 m/s^2)?",
    "A substance decays with a half-life of six hours. After eighteen hours, what fraction of the original amount is left?",
    "What single resistance is equivalent to a 4-ohm resistor in parallel with a 12-ohm resistor?",
]
